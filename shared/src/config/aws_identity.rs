//! The worker's own AWS identity, from the variables every AWS SDK reads, in
//! the SDKs' order: static keys (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`), else the container credentials endpoint that ECS
//! (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`) and EKS Pod Identity
//! (`AWS_CONTAINER_CREDENTIALS_FULL_URI` with `AWS_CONTAINER_AUTHORIZATION_TOKEN`
//! or `…_TOKEN_FILE`) give a task its role's credentials by. No profile files,
//! no instance metadata.
use super::ConfigError;

/// Where the worker's own AWS credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsIdentity {
    Keys(AwsKeys),
    /// Credentials served over HTTP, refreshed before they expire.
    Container {
        url: String,
        token: Option<ContainerToken>,
    },
}

/// The `Authorization` a container credentials endpoint wants.
#[derive(Clone, PartialEq, Eq)]
pub enum ContainerToken {
    Value(String),
    /// Read at each refresh (EKS rotates it).
    File(std::path::PathBuf),
}

impl std::fmt::Debug for ContainerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Value(_) => f.write_str("Value(…)"),
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// Static AWS credentials. `Debug` never shows the secret parts.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKeys").field("access_key_id", &self.access_key_id).finish_non_exhaustive()
    }
}

/// ECS's credentials endpoint, which `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` is relative to.
const ECS_CREDENTIALS_HOST: &str = "http://169.254.170.2";

impl AwsIdentity {
    /// From the standard variables; `None` when none is set.
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        if let (Some(access_key_id), Some(secret_access_key)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY"))
        {
            let session_token = var("AWS_SESSION_TOKEN");
            return Ok(Some(Self::Keys(AwsKeys { access_key_id, secret_access_key, session_token })));
        }
        let token = match (var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"), var("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
            (Some(path), _) => Some(ContainerToken::File(path.into())),
            (None, Some(value)) => Some(ContainerToken::Value(value)),
            (None, None) => None,
        };
        if let Some(relative) = var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return Ok(Some(Self::Container { url: format!("{ECS_CREDENTIALS_HOST}{relative}"), token }));
        }
        let Some(url) = var("AWS_CONTAINER_CREDENTIALS_FULL_URI") else { return Ok(None) };
        check_full_uri(&url).map_err(|message| ConfigError {
            key: "AWS_CONTAINER_CREDENTIALS_FULL_URI".into(),
            message: message.into(),
        })?;
        Ok(Some(Self::Container { url, token }))
    }
}

/// As the AWS SDKs require: https, or http to loopback or to the ECS and EKS
/// credentials agents' link-local addresses.
fn check_full_uri(text: &str) -> Result<(), &'static str> {
    let url = url::Url::parse(text).map_err(|_| "is not a URL")?;
    let allowed_http = match url.host() {
        Some(url::Host::Ipv4(address)) => {
            address.is_loopback()
                || address == std::net::Ipv4Addr::new(169, 254, 170, 2)
                || address == std::net::Ipv4Addr::new(169, 254, 170, 23)
        }
        Some(url::Host::Ipv6(address)) => {
            address.is_loopback() || address == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23)
        }
        Some(url::Host::Domain(name)) => name == "localhost",
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if allowed_http => Ok(()),
        _ => Err("must be https, or http to loopback or the ECS/EKS credentials agent"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_credentials_uri_is_https_or_a_local_agent() {
        for ok in [
            "https://creds.example/x",
            "http://127.0.0.1:9000/creds",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
        ] {
            assert!(check_full_uri(ok).is_ok(), "{ok}");
        }
        for refused in ["http://10.0.0.1/creds", "http://example.com/creds", "ftp://127.0.0.1/"] {
            assert!(check_full_uri(refused).is_err(), "{refused}");
        }
    }
}
