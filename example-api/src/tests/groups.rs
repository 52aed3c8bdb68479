//! `/groups/`: CRUD, form and JSON bodies, `400`s and `404`s.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::*;
use crate::fields::{BLANK, REQUIRED};
use crate::groups::DUPLICATE;

#[tokio::test]
async fn crud_on_every_backend() {
    for store in all_stores().await {
        let app = proxied(store.clone());
        let name = unique("staff");
        let a = call(
            &app,
            Method::POST,
            "/groups/",
            "groups",
            Some((FORM, &format!("name={name}"))),
        )
        .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.json);
        let id = a.json["id"].as_i64().unwrap();
        assert_eq!(a.json, json!({"id": id, "name": name}));

        let a = call(&app, Method::GET, "/groups/", "groups", None).await;
        assert!(
            a.json
                .as_array()
                .unwrap()
                .contains(&json!({"id": id, "name": name}))
        );
        let a = call(&app, Method::GET, &format!("/groups/{id}/"), "groups", None).await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::OK, json!({"id": id, "name": name}))
        );

        let renamed = unique("admins");
        let a = call(
            &app,
            Method::PUT,
            &format!("/groups/{id}/"),
            "groups",
            Some((JSON, &json!({"name": renamed}).to_string())),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::OK, json!({"id": id, "name": renamed}))
        );
        // PATCH with nothing changes nothing; PUT with nothing is a 400.
        let a = call(
            &app,
            Method::PATCH,
            &format!("/groups/{id}/"),
            "groups",
            Some((JSON, "{}")),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::OK, json!({"id": id, "name": renamed}))
        );
        let a = call(
            &app,
            Method::PUT,
            &format!("/groups/{id}/"),
            "groups",
            Some((FORM, "")),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"name": [REQUIRED]}))
        );
        let a = call(
            &app,
            Method::PATCH,
            &format!("/groups/{id}/"),
            "groups",
            Some((FORM, &format!("name={renamed}"))),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);

        // Duplicates, on create and on rename.
        let a = call(
            &app,
            Method::POST,
            "/groups/",
            "groups",
            Some((JSON, &json!({"name": renamed}).to_string())),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"name": [DUPLICATE]}))
        );
        let other = unique("other");
        let a = call(
            &app,
            Method::POST,
            "/groups/",
            "groups",
            Some((JSON, &json!({"name": other}).to_string())),
        )
        .await;
        let other_id = a.json["id"].as_i64().unwrap();
        let a = call(
            &app,
            Method::PATCH,
            &format!("/groups/{other_id}/"),
            "groups",
            Some((JSON, &json!({"name": renamed}).to_string())),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"name": [DUPLICATE]}))
        );

        let a = call(
            &app,
            Method::DELETE,
            &format!("/groups/{id}/"),
            "groups",
            None,
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::NO_CONTENT, serde_json::Value::Null)
        );
        for method in [Method::GET, Method::PUT, Method::PATCH, Method::DELETE] {
            let a = call(
                &app,
                method.clone(),
                &format!("/groups/{id}/"),
                "groups",
                Some((JSON, "{}")),
            )
            .await;
            assert_eq!(
                (a.status, a.json),
                (StatusCode::NOT_FOUND, json!({"detail": "Not found."})),
                "{method}"
            );
        }
    }
}

#[tokio::test]
async fn bad_names_and_ids() {
    let app = app_on_sqlite().await;
    let post = |body: &'static str| {
        let app = app.clone();
        async move { call(&app, Method::POST, "/groups/", "groups", Some((JSON, body))).await }
    };
    assert_eq!(post("{}").await.json, json!({"name": [REQUIRED]}));
    assert_eq!(
        post(r#"{"name": " "}"#).await.json,
        json!({"name": [BLANK]})
    );
    assert_eq!(
        post(r#"{"name": {"a": 1}}"#).await.json,
        json!({"name": ["Not a valid string."]})
    );
    let long = json!({"name": "g".repeat(151)}).to_string();
    let a = call(
        &app,
        Method::POST,
        "/groups/",
        "groups",
        Some((JSON, &long)),
    )
    .await;
    assert_eq!(
        (a.status, a.json),
        (
            StatusCode::BAD_REQUEST,
            json!({"name": ["Ensure this field has no more than 150 characters."]})
        )
    );
    for id in ["x", "-3", "1e2", "18446744073709551616"] {
        let a = call(&app, Method::GET, &format!("/groups/{id}/"), "groups", None).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{id}");
    }
}
