//! `/users/`: CRUD, form and JSON bodies, DRF-like `400`s, `404`s, the write-only password.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::*;
use crate::fields::{BAD_EMAIL, BAD_USERNAME, BLANK, REQUIRED};
use crate::users::DUPLICATE;

const RW: &str = "read write";

#[tokio::test]
async fn crud_on_every_backend() {
    for store in all_stores().await {
        let app = proxied(store.clone());
        let name = unique("alice");

        // Create, form-encoded, with a password: 201, the password never shown, but usable.
        let body = format!(
            "username={name}&email={name}%40example.com&first_name=Alice&password=s3cret%20pw"
        );
        let a = call(&app, Method::POST, "/users/", RW, Some((FORM, &body))).await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.json);
        let id = a.json["id"].as_i64().unwrap();
        assert_eq!(
            a.json,
            json!({"id": id, "username": name, "email": format!("{name}@example.com"), "first_name": "Alice", "last_name": ""})
        );
        assert!(
            store
                .authenticate_user(&name, "s3cret pw")
                .await
                .unwrap()
                .is_some()
        );

        // List (a JSON array) and retrieve.
        let a = call(&app, Method::GET, "/users/", "read", None).await;
        assert_eq!(a.status, StatusCode::OK);
        let listed = a.json.as_array().unwrap();
        let me = listed.iter().find(|u| u["id"] == id).expect("listed");
        assert_eq!(me["username"], name.as_str());
        assert!(
            listed
                .iter()
                .all(|u| u.get("password").is_none() && u.as_object().unwrap().len() == 5)
        );
        let a = call(&app, Method::GET, &format!("/users/{id}/"), "read", None).await;
        assert_eq!(
            (a.status, &a.json["username"]),
            (StatusCode::OK, &json!(name))
        );

        // PATCH (JSON): only what is given changes; a new password works, the old one no longer.
        let a = call(
            &app,
            Method::PATCH,
            &format!("/users/{id}/"),
            RW,
            Some((JSON, r#"{"last_name": "Liddell", "password": "n3w"}"#)),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.json);
        assert_eq!(
            (a.json["last_name"].as_str(), a.json["first_name"].as_str()),
            (Some("Liddell"), Some("Alice"))
        );
        assert!(
            store
                .authenticate_user(&name, "n3w")
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            store
                .authenticate_user(&name, "s3cret pw")
                .await
                .unwrap()
                .is_none()
        );

        // PUT needs the username; fields left out keep their values.
        let a = call(
            &app,
            Method::PUT,
            &format!("/users/{id}/"),
            "write",
            Some((JSON, r#"{"email": "a@b.org"}"#)),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"username": [REQUIRED]}))
        );
        let renamed = unique("alicia");
        let body = format!("username={renamed}&first_name=Alicia");
        let a = call(
            &app,
            Method::PUT,
            &format!("/users/{id}/"),
            "write",
            Some((FORM, &body)),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(
            a.json,
            json!({"id": id, "username": renamed, "email": format!("{name}@example.com"), "first_name": "Alicia", "last_name": "Liddell"})
        );
        // Its own username is no duplicate.
        let a = call(
            &app,
            Method::PATCH,
            &format!("/users/{id}/"),
            "write",
            Some((JSON, &json!({"username": renamed}).to_string())),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);

        // Delete: 204 with no body, then 404 everywhere.
        let a = call(
            &app,
            Method::DELETE,
            &format!("/users/{id}/"),
            "write",
            None,
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::NO_CONTENT, serde_json::Value::Null)
        );
        for method in [Method::GET, Method::DELETE, Method::PATCH, Method::PUT] {
            let a = call(
                &app,
                method.clone(),
                &format!("/users/{id}/"),
                RW,
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
async fn validation_errors_per_field() {
    for store in all_stores().await {
        let app = proxied(store);
        let post = |body: String| {
            let app = app.clone();
            async move { call(&app, Method::POST, "/users/", "write", Some((JSON, &body))).await }
        };
        let a = post("{}".into()).await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"username": [REQUIRED]}))
        );
        let a = call(
            &app,
            Method::POST,
            "/users/",
            "write",
            Some((FORM, "email=x")),
        )
        .await;
        assert_eq!(
            a.json,
            json!({"username": [REQUIRED], "email": [BAD_EMAIL]})
        );
        let a = post(json!({"username": "  ", "email": "nope", "first_name": "x".repeat(151), "password": ""}).to_string()).await;
        assert_eq!(
            a.json,
            json!({
                "username": [BLANK],
                "email": [BAD_EMAIL],
                "first_name": ["Ensure this field has no more than 150 characters."],
                "password": [BLANK],
            })
        );
        let a =
            post(json!({"username": "bad name!", "last_name": null, "email": 5}).to_string()).await;
        assert_eq!(
            a.json,
            json!({"username": [BAD_USERNAME], "last_name": ["This field may not be null."], "email": [BAD_EMAIL]})
        );
        let a = post(json!({"username": ["x"]}).to_string()).await;
        assert_eq!(a.json, json!({"username": ["Not a valid string."]}));

        // Duplicate usernames, on create and on rename.
        let first = unique("dup");
        let a = post(json!({"username": first}).to_string()).await;
        assert_eq!(a.status, StatusCode::CREATED);
        let a = post(json!({"username": first, "email": "ok@example.com"}).to_string()).await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"username": [DUPLICATE]}))
        );
        let second = unique("other");
        let a = post(json!({"username": second}).to_string()).await;
        let id = a.json["id"].as_i64().unwrap();
        let a = call(
            &app,
            Method::PATCH,
            &format!("/users/{id}/"),
            "write",
            Some((FORM, &format!("username={first}"))),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"username": [DUPLICATE]}))
        );
        // Unknown and read-only fields are ignored, as DRF does.
        let third = unique("third");
        let a = post(
            json!({"username": third, "id": 1, "is_superuser": true, "colour": "blue"}).to_string(),
        )
        .await;
        assert_eq!(a.status, StatusCode::CREATED);
        assert_ne!(a.json["id"], 1);
    }
}

#[tokio::test]
async fn unparseable_bodies_and_ids() {
    let app = app_on_sqlite().await;
    let a = call(
        &app,
        Method::POST,
        "/users/",
        "write",
        Some((JSON, "{\"username\": ")),
    )
    .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.json["detail"]
            .as_str()
            .unwrap()
            .starts_with("JSON parse error - ")
    );
    let a = call(
        &app,
        Method::POST,
        "/users/",
        "write",
        Some((JSON, "[1, 2]")),
    )
    .await;
    assert_eq!(
        a.json,
        json!({"non_field_errors": ["Invalid data. Expected a dictionary, but got list."]})
    );
    let a = call(
        &app,
        Method::POST,
        "/users/",
        "write",
        Some(("text/plain", "username=x")),
    )
    .await;
    assert_eq!(
        (a.status, a.json),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            json!({"detail": "Unsupported media type \"text/plain\" in request."})
        )
    );
    let big = format!("username={}", "x".repeat(crate::payload::MAX_BODY));
    let a = call(&app, Method::POST, "/users/", "write", Some((FORM, &big))).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    for id in [
        "abc",
        "-1",
        "1.5",
        "99999999999999999999999",
        "%FF",
        "0x10",
        "9223372036854775807",
    ] {
        for (method, scope) in [
            (Method::GET, "read"),
            (Method::PATCH, "write"),
            (Method::DELETE, "write"),
        ] {
            let a = call(
                &app,
                method.clone(),
                &format!("/users/{id}/"),
                scope,
                Some((JSON, "{}")),
            )
            .await;
            assert_eq!(
                (a.status, &a.json),
                (StatusCode::NOT_FOUND, &json!({"detail": "Not found."})),
                "{method} {id}"
            );
        }
    }
    // 404 comes before the body is looked at, as in DRF.
    let a = call(
        &app,
        Method::PUT,
        "/users/424242/",
        "write",
        Some((JSON, "{oops")),
    )
    .await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}
