//! `/users/`: CRUD, form and JSON bodies, DRF-like `400`s, `404`s, the write-only password.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::*;
use crate::fields::{BAD_EMAIL, BAD_USERNAME, BLANK, REQUIRED};
use crate::users::{CREATE_ONLY, DUPLICATE, OPERATOR_ONLY};
use authserver::store::NewUser;

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

        // PATCH (JSON): only what is given changes.
        let a = call(
            &app,
            Method::PATCH,
            &format!("/users/{id}/"),
            RW,
            Some((JSON, r#"{"last_name": "Liddell"}"#)),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.json);
        assert_eq!(
            (a.json["last_name"].as_str(), a.json["first_name"].as_str()),
            (Some("Liddell"), Some("Alice"))
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
        let a = post(json!({"username": third, "id": 1, "colour": "blue"}).to_string()).await;
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

/// Issue 8, finding 1: a `write` token (a user's or a client's) could reset the administrator's
/// password, rename it, promote itself or delete superusers. Every such attempt is refused, and
/// the accounts are left exactly as they were.
#[tokio::test]
async fn staff_and_superusers_are_out_of_the_apis_reach() {
    for store in all_stores().await {
        let app = proxied(store.clone());
        let mut privileged = Vec::new();
        for (is_staff, is_superuser) in [(true, true), (true, false), (false, true)] {
            let name = unique("boss");
            let user = store
                .create_user(&NewUser {
                    username: name.clone(),
                    password: Some("original pw".into()),
                    is_active: true,
                    is_staff,
                    is_superuser,
                    ..NewUser::default()
                })
                .await
                .unwrap();
            privileged.push(user);
        }
        for user in &privileged {
            let uri = format!("/users/{}/", user.id);
            for (method, body) in [
                (Method::PATCH, r#"{"password": "pwned"}"#),
                (Method::PATCH, r#"{"username": "renamed"}"#),
                (
                    Method::PUT,
                    r#"{"username": "renamed", "email": "x@y.org"}"#,
                ),
                (Method::PATCH, "{oops"),
                (Method::DELETE, ""),
            ] {
                let a = call(&app, method.clone(), &uri, RW, Some((JSON, body))).await;
                assert_eq!(
                    (a.status, &a.json),
                    (
                        StatusCode::FORBIDDEN,
                        &json!({"detail": crate::error::PERMISSION_DENIED})
                    ),
                    "{method} {uri} {body}"
                );
            }
            assert_eq!(store.get_user(user.id).await.unwrap().as_ref(), Some(user));
            assert!(
                store
                    .authenticate_user(&user.username, "original pw")
                    .await
                    .unwrap()
                    .is_some()
            );
        }

        // An ordinary user: the password and the operator flags are never writable on update.
        let create = |body: Value| {
            let app = app.clone();
            async move {
                let body = body.to_string();
                call(&app, Method::POST, "/users/", RW, Some((JSON, &body))).await
            }
        };
        let name = unique("plain");
        let a = create(json!({"username": name, "password": "first pw"})).await;
        assert_eq!(a.status, StatusCode::CREATED);
        let id = a.json["id"].as_i64().unwrap();
        let uri = format!("/users/{id}/");
        let a = call(
            &app,
            Method::PATCH,
            &uri,
            RW,
            Some((JSON, r#"{"password": "second pw"}"#)),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (StatusCode::BAD_REQUEST, json!({"password": [CREATE_ONLY]}))
        );
        let a = call(
            &app,
            Method::PATCH,
            &uri,
            RW,
            Some((FORM, "is_staff=true&is_superuser=1&is_active=false")),
        )
        .await;
        assert_eq!(
            (a.status, a.json),
            (
                StatusCode::BAD_REQUEST,
                json!({"is_staff": [OPERATOR_ONLY], "is_superuser": [OPERATOR_ONLY], "is_active": [OPERATOR_ONLY]})
            )
        );
        let a = create(json!({"username": unique("wannabe"), "is_superuser": true})).await;
        assert_eq!(
            (a.status, a.json),
            (
                StatusCode::BAD_REQUEST,
                json!({"is_superuser": [OPERATOR_ONLY]})
            )
        );
        let user = store.get_user(id).await.unwrap().unwrap();
        assert!(user.is_active && !user.is_staff && !user.is_superuser);
        assert!(
            store
                .authenticate_user(&name, "first pw")
                .await
                .unwrap()
                .is_some()
        );

        // The guard holds in storage too: a promotion that lands between the API's read and its
        // write still leaves the account untouched.
        let group = store.create_group(&unique("crew")).await.unwrap();
        store.add_member(group.id, id).await.unwrap();
        store
            .update_user(
                id,
                &authserver::store::UserUpdate {
                    is_staff: Some(true),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let update = authserver::store::UserUpdate {
            first_name: Some("Mallory".into()),
            ..Default::default()
        };
        assert_eq!(
            store.update_ordinary_user(id, &update).await.unwrap(),
            authserver::store::Guarded::Privileged
        );
        assert_eq!(
            store.delete_ordinary_user(id).await.unwrap(),
            authserver::store::Guarded::Privileged
        );
        assert_eq!(
            store.delete_ordinary_user(i64::MAX).await.unwrap(),
            authserver::store::Guarded::Missing
        );
        let user = store.get_user(id).await.unwrap().unwrap();
        assert!(user.is_staff && user.first_name.is_empty());
        // The refused deletion was undone whole: the membership it removed first is back.
        assert_eq!(store.user_groups(id).await.unwrap(), vec![group]);
    }
}
