//! `authserver resource`: the API resources (RFC 8707) tokens may be requested for.

use crate::cli::ResourceCommand;
use crate::config::Settings;
use crate::store::{Store, StoreError};
use crate::validation::{self, ResourceDraft};

pub async fn resource(
    store: &Store,
    settings: &Settings,
    command: ResourceCommand,
) -> anyhow::Result<()> {
    match command {
        ResourceCommand::Create {
            identifier,
            name,
            scopes,
            token_format,
            lifetime,
        } => {
            let draft = ResourceDraft {
                name: name.unwrap_or_else(|| identifier.clone()).trim().to_owned(),
                identifier: identifier.trim().to_owned(),
                scopes,
                token_format: token_format.unwrap_or_default().trim().to_owned(),
                access_token_lifetime: lifetime.map(|l| l.to_string()).unwrap_or_default(),
            };
            let input = validation::resource(settings, &draft).map_err(|refusals| {
                let lines: Vec<String> = refusals
                    .iter()
                    .map(|(field, message)| match field {
                        "access_token_lifetime" => format!("--lifetime: {message}"),
                        field => format!("--{}: {message}", field.replace('_', "-")),
                    })
                    .collect();
                anyhow::anyhow!("{}", lines.join("\n"))
            })?;
            let created = store.create_resource(&input).await.map_err(|e| match e {
                StoreError::Conflict(_) => {
                    anyhow::anyhow!("--identifier: A resource with that identifier already exists.")
                }
                other => other.into(),
            })?;
            println!(
                "created resource {} ({}), scopes: {}",
                created.identifier,
                created.name,
                created.scopes.join(" ")
            );
        }
        ResourceCommand::List { json } => {
            let resources = store.list_resources().await?;
            if json {
                println!("{}", serde_json::to_string(&resources)?);
            } else {
                println!("IDENTIFIER  NAME  SCOPES  FORMAT  LIFETIME");
                for r in &resources {
                    println!(
                        "{}  {}  {}  {}  {}",
                        r.identifier,
                        r.name,
                        r.scopes.join(" "),
                        r.token_format.map_or("default", |f| f.as_str()),
                        r.access_token_lifetime
                            .map_or("default".to_owned(), |s| format!("{s}s")),
                    );
                }
            }
        }
        ResourceCommand::Delete { identifier } => {
            if !store.delete_resource(&identifier).await? {
                anyhow::bail!("no resource {identifier:?}");
            }
            println!("deleted resource {identifier}");
        }
    }
    Ok(())
}
