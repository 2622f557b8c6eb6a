//! Reading a process's `/metrics` (Prometheus text exposition) in tests.

/// The sum of the samples of `name` whose labels include every `(label,
/// value)` given (0 when there is none), in Prometheus text exposition.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    relayops_shared::observe::series_sum(text, name, labels).unwrap_or(0.0)
}

pub async fn scrape(http: &reqwest::Client, base: &str) -> String {
    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}
