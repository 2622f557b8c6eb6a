//! A webhook endpoint URL: http(s), a host, no credentials, bounded length.
//! Whether the host's addresses may be connected to is decided at send time on
//! the resolved address, not here.
use url::Url;

use super::ValidationError;

const MAX_LEN: usize = 2048;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl(Url);

impl EndpointUrl {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "url";
        if text.len() > MAX_LEN {
            return Err(ValidationError::new(field, format!("must be at most {MAX_LEN} characters")));
        }
        let url =
            Url::parse(text).map_err(|error| ValidationError::new(field, format!("is not a valid URL ({error})")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ValidationError::new(field, "must use http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ValidationError::new(field, "must have a host"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ValidationError::new(field, "must not contain credentials"));
        }
        if url.fragment().is_some() {
            return Err(ValidationError::new(field, "must not contain a fragment"));
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_with_a_host_are_accepted() {
        assert!(EndpointUrl::parse("https://example.com/hook").is_ok());
        assert!(EndpointUrl::parse("http://127.0.0.1:8080/sim/ok").is_ok());
        for bad in [
            "ftp://example.com/",
            "https://user:pw@example.com/",
            "not a url",
            "https://",
            "https://example.com/#frag",
            "file:///etc/passwd",
        ] {
            assert!(EndpointUrl::parse(bad).is_err(), "{bad} should be refused");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_LEN));
        assert!(EndpointUrl::parse(&long).is_err());
    }
}
