//! A running job's TensorBoard through the service (issue 26): `:tensorboard` starts it in the job's
//! container and answers a one-time link; the link's ticket becomes a cookie scoped to the job's
//! path; only that cookie reaches the proxied TensorBoard, never another job's, and not after the job
//! ends. The browser's cookies and credentials never reach TensorBoard.

use crate::common::wait::wait_for_async;
use crate::service_support::Service;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);
const EVENTS: &str = "echo events > \"$TAO_API_RESULTS_DIR/$TAO_JOB_ID/events.out.tfevents.7\"; sleep 300";

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn open_link(svc: &Service, id: &str) -> Value {
    let r = svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    let status = r.status();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// The cookie (name=value) a ticket link gives, after checking how it is scoped.
async fn redeem(svc: &Service, http: &reqwest::Client, link: &Value, id: &str) -> String {
    let url = format!("{}{}", svc.url, link["url"].as_str().unwrap());
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], format!("/tensorboard/{id}/"));
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.contains(&format!("Path=/tensorboard/{id}/")), "{set}");
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    let used = http.get(&url).send().await.unwrap();
    assert_eq!(used.status(), StatusCode::UNAUTHORIZED, "a ticket works once");
    set.split(';').next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tensorboard_is_reached_through_the_service_with_a_one_time_link() {
    let svc = Service::start();
    let http = no_redirects();
    let (s, a) =
        svc.create(&json!({"name": "tb", "image": "ubuntu:22.04", "command": EVENTS, "workspace": "login1"})).await;
    assert_eq!(s, 201, "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    // A job that is not running yet has no TensorBoard (or one that already runs: then skip ahead).
    let early =
        svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    assert!(matches!(early.status().as_u16(), 409 | 200), "{}", early.text().await.unwrap());
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Running").await;

    let anonymous = http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let link = open_link(&svc, &id).await;
    assert!(link["node"].as_str().unwrap().starts_with("node"), "{link}");
    let cookie = redeem(&svc, &http, &link, &id).await;

    let page_url = format!("{}/tensorboard/{id}/", svc.url);
    let bare = http.get(&page_url).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::UNAUTHORIZED, "a bearer token is not a TensorBoard session");
    let page = wait_for_async("the events file on the proxied page", LIMIT, Duration::from_millis(300), || async {
        let r = http.get(&page_url).header(COOKIE, &cookie).send().await.unwrap();
        let (status, text) = (r.status(), r.text().await.unwrap());
        if status == StatusCode::OK && text.contains("events.out.tfevents.7") {
            Ok(text)
        } else {
            Err(format!("{status}: {text}"))
        }
    })
    .await;
    assert!(page.contains("TensorBoard stand-in") && page.contains(&id), "{page}");

    // A sub-path with a query reaches TensorBoard as asked, without our cookie or a token.
    let data: Value = http
        .get(format!("{page_url}data/logdir?run=a%2Fb&x=1"))
        .header(COOKIE, format!("other=1; {cookie}"))
        .bearer_auth(&svc.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(data["query"], "run=a%2Fb&x=1");
    assert_eq!(data["cookie"], Value::Null, "{data}");
    assert_eq!(data["authorization"], Value::Null, "{data}");
    assert!(data["files"].as_array().unwrap().iter().any(|f| f == "events.out.tfevents.7"), "{data}");

    // The cookie is this job's only.
    let (s, b) = svc
        .create(&json!({"name": "tb2", "image": "ubuntu:22.04", "command": "sleep 300", "workspace": "login1"}))
        .await;
    assert_eq!(s, 201, "{b}");
    let other = b["id"].as_str().unwrap().to_string();
    let cross = http.get(format!("{}/tensorboard/{other}/", svc.url)).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(cross.status(), StatusCode::UNAUTHORIZED);

    // When the job ends, its TensorBoard goes with it.
    for job in [&id, &other] {
        let r = svc.http.post(svc.api(&format!("/jobs/{job}:cancel"))).bearer_auth(&svc.token).send().await.unwrap();
        assert!(r.status().is_success());
    }
    svc.wait_job(&id, LIMIT, |j| j["status"] == "Canceled").await;
    let gone = http.get(&page_url).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::GONE, "{}", gone.text().await.unwrap());
    let after = http.get(&page_url).header(COOKIE, &cookie).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::UNAUTHORIZED, "the session ended with the job");
    let ended =
        svc.http.post(svc.api(&format!("/jobs/{id}:tensorboard"))).bearer_auth(&svc.token).send().await.unwrap();
    assert_eq!(ended.status(), StatusCode::CONFLICT);
}
