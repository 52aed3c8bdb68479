use super::*;
use crate::store::token_cache::TokenKey;
use crate::store::{GrantType, NewTokens, UserUpdate};
use std::time::{Duration, Instant};

#[test]
fn changes_survive_their_channel() {
    for change in [
        Change::Application,
        Change::User(7),
        Change::EveryToken,
        Change::Spent("f x".into()),
        Change::Appended {
            id: 42,
            event: Revocation::Consent {
                sub: "7".into(),
                client_id: "c d".into(),
            },
        },
    ] {
        assert_eq!(Change::read(change.channel(), &change.payload()), change);
    }
    assert_eq!(Change::read(Channel::Tokens, "garbage"), Change::EveryToken);
    assert_eq!(Change::read(Channel::Tokens, "user x"), Change::EveryToken);
    assert_eq!(Change::read(Channel::Events, ""), Change::UnreadableEvent);
    assert_eq!(
        Change::read(Channel::Events, "x session-revoked jwt_id j"),
        Change::UnreadableEvent
    );
}

/// The payloads the hot path's statements write in SQL ([`notify_spent!`], [`notify_appended!`])
/// are read back as the changes they announce, on the channels of the statement's schema.
#[tokio::test]
async fn the_hot_paths_notifications_are_read_as_their_changes() {
    let Some(url) = crate::testing::postgres_schema_url().await else {
        return;
    };
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await.unwrap();
    let mut names = Vec::new();
    for channel in Channel::ALL {
        let name: String = sqlx::query_scalar(concat!("SELECT ", channel_of!("$1")))
            .bind(channel.base())
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(name.starts_with(channel.base()) && name != channel.base(), "{name}");
        names.push((name, channel));
    }
    listener
        .listen_all(names.iter().map(|(name, _)| name.as_str()))
        .await
        .unwrap();
    sqlx::query(concat!("SELECT ", notify_spent!("$1", "$2")))
        .bind(Channel::Tokens.base())
        .bind("a family")
        .execute(&pool)
        .await
        .unwrap();
    let event = Revocation::Consent {
        sub: "7".into(),
        client_id: "c d".into(),
    };
    let (event_type, format, subject) = crate::store::events::columns(&event);
    sqlx::query(concat!(
        "SELECT ",
        notify_appended!("$1", "$2", "$3", "$4", "$5")
    ))
    .bind(Channel::Events.base())
    .bind(42_i64)
    .bind(event_type)
    .bind(format)
    .bind(subject)
    .execute(&pool)
    .await
    .unwrap();
    for expected in [Change::Spent("a family".into()), Change::Appended { id: 42, event }] {
        let heard = tokio::time::timeout(Duration::from_secs(5), listener.recv())
            .await
            .expect("a notification")
            .unwrap();
        let channel = names
            .iter()
            .find(|(name, _)| name == heard.channel())
            .map(|(_, channel)| *channel)
            .expect("one of the three channels");
        assert_eq!(channel, expected.channel());
        assert_eq!(Change::read(channel, heard.payload()), expected);
    }
}

/// The connections listening on this schema's channels (whatever their name), and those of
/// them named [`LISTENER_NAME`].
async fn listening(store: &Store) -> (i64, i64) {
    sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE application_name = $1) FROM pg_stat_activity
         WHERE query LIKE 'LISTEN%' AND query LIKE '%' || md5(current_schema()) || '%'",
    )
    .bind(LISTENER_NAME)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Waits until `what` holds, at most `within`.
async fn until(within: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A store opened on PostgreSQL holds one listening connection, however many stores the process
/// opens on the database, and through it hears the three kinds of change of another process
/// (here a store on another URL of the same schema, which gets a bus of its own): an application
/// changed empties its application cache, a user changed evicts the user's tokens from its token
/// cache, an appended event wakes its waiting polls. A deployment in another schema of the same
/// database hears none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_per_process_hears_every_kind_of_change_of_its_schema_alone() {
    let Some(url) = crate::testing::postgres_schema_url().await else {
        return;
    };
    let within = Duration::from_secs(5);
    let a = crate::testing::connect(&url).await;
    until(within, "a listens", async || a.client_cache_active()).await;
    assert_eq!(listening(&a).await, (1, 1), "one store, one listener");
    let a_again = crate::testing::connect(&url).await;
    until(within, "the second store listens", async || {
        a_again.client_cache_active()
    })
    .await;
    assert_eq!(listening(&a).await, (1, 1), "two stores, one listener");
    // Another process, as far as the bus can tell.
    let b = crate::testing::connect(&format!("{url}&application_name=tokengate-test-b")).await;
    until(within, "b listens", async || {
        b.client_cache_active() && b.token_cache.usable()
    })
    .await;
    assert_eq!(listening(&a).await, (2, 2), "one listener per bus");
    // A deployment in another schema.
    let other_url = crate::testing::postgres_schema_url().await.unwrap();
    let other = crate::testing::connect(&other_url).await;
    until(within, "the other schema listens", async || {
        other.client_cache_active()
    })
    .await;

    // An application changed: b's cache of it is emptied, the other schema's is not.
    let (client_id, _) = crate::testing::application(&a, GrantType::ClientCredentials, true).await;
    let (other_client, _) =
        crate::testing::application(&other, GrantType::ClientCredentials, true).await;
    let app = b
        .find_application_by_client_id(&client_id)
        .await
        .unwrap()
        .unwrap();
    other
        .find_application_by_client_id(&other_client)
        .await
        .unwrap()
        .unwrap();
    assert!(b.clients.get(&client_id).await.is_some(), "b caches it");
    assert!(other.clients.get(&other_client).await.is_some());
    a.regenerate_secret(app.id, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    until(within, "b's application cache emptied", async || {
        b.clients.get(&client_id).await.is_none()
    })
    .await;
    // By now the other schema's listener would have heard anything sent on its channels.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        other.clients.get(&other_client).await.is_some(),
        "another schema's application change emptied this one's cache"
    );

    // A user changed: b's cached introspection of their token is evicted.
    let user = crate::testing::user(&a, "bus-user", "a password of some length").await;
    let tokens = a
        .issue_tokens(&NewTokens {
            application_id: app.id,
            user_id: Some(user.id),
            scope: "read".into(),
            access_lifetime: 300,
            refresh_lifetime: None,
            family: None,
            cnf_x5t_s256: None,
            cnf_jkt: None,
            audience: None,
        })
        .await
        .unwrap();
    let key = TokenKey::of(&tokens.access_token);
    b.introspect_token(&tokens.access_token).await.unwrap();
    assert!(
        b.introspect_token(&tokens.access_token).await.unwrap().1,
        "b answers from its cache"
    );
    let update = UserUpdate {
        username: Some("bus-user-renamed".into()),
        ..Default::default()
    };
    a.update_user(user.id, &update).await.unwrap().unwrap();
    until(within, "b's cached introspection evicted", async || {
        b.token_cache.get(&key).await.is_none()
    })
    .await;
    let (answer, hit) = b.introspect_token(&tokens.access_token).await.unwrap();
    assert!(!hit);
    assert_eq!(
        answer.unwrap().record.username.as_deref(),
        Some("bus-user-renamed")
    );

    // An event appended: b's waiting polls wake, the other schema's do not.
    let (b_bell, other_bell) = (b.event_bell(), other.event_bell());
    let b_woken = b_bell.notified();
    let other_woken = other_bell.notified();
    tokio::pin!(b_woken, other_woken);
    b_woken.as_mut().enable();
    other_woken.as_mut().enable();
    a.log_event(&Revocation::Family {
        jti: "bus-test".into(),
    })
    .await
    .unwrap();
    tokio::time::timeout(within, b_woken)
        .await
        .expect("b's waiting polls woken");
    // By now the other schema's listener would have heard anything sent on its channels.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), other_woken)
            .await
            .is_err(),
        "another schema's event woke this one's polls"
    );
    assert_eq!(listening(&a).await, (2, 2), "still one listener per bus");
}
