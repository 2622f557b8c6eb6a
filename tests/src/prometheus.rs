//! Reading a process's `/metrics` (Prometheus text exposition) in tests.

/// Parses Prometheus text exposition: the sum of the samples of `name` whose
/// labels include every `(label, value)` given (0 when there is none).
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines().filter(|line| !line.starts_with('#') && !line.trim().is_empty()) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let (series_name, series_labels) = match series.split_once('{') {
            Some((series_name, rest)) => (series_name, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if series_name != name {
            continue;
        }
        let present: Vec<(&str, &str)> = series_labels
            .split(',')
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| (key.trim(), value.trim().trim_matches('"')))
            .collect();
        if labels.iter().all(|wanted| present.contains(wanted)) {
            total += value.parse::<f64>().unwrap_or_else(|_| panic!("not a number in `{line}`"));
        }
    }
    total
}

pub async fn scrape(http: &reqwest::Client, base: &str) -> String {
    let response = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    response.text().await.unwrap()
}
