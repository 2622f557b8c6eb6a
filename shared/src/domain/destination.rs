//! Where an endpoint's deliveries go: a webhook (an HTTP POST to its URL, the
//! default) or an Amazon SQS queue in the customer's account (its queue URL).
//! A queue URL names an AWS partition's SQS service: `https://sqs.<region>.
//! amazonaws.com/<account>/<queue>` (`.amazonaws.com.cn` in China), so a
//! queue destination can only ever reach AWS, whatever its text — the worker
//! sends to the region's service endpoint, not to the URL's host. It sends with
//! RelayOps' own AWS identity, or as a role in the customer's account
//! (`AwsRoleArn`) that it assumes with the tenant's id as `ExternalId`.
use super::{EndpointUrl, ValidationError};

/// How an endpoint's deliveries leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Destination {
    /// An HTTP POST to the endpoint's URL, signed (Standard Webhooks).
    #[default]
    Webhook,
    /// `SendMessage` to the SQS queue at the endpoint's URL.
    AwsSqs,
}

impl Destination {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::AwsSqs => "aws_sqs",
        }
    }

    /// As stored (the column's CHECK allows only these names).
    pub fn from_stored(text: &str) -> Self {
        if text == "aws_sqs" {
            Self::AwsSqs
        } else {
            Self::Webhook
        }
    }
}

/// An SQS queue URL: which region's service to call, and whether the queue is
/// FIFO (its messages then need a group id and get a deduplication id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsQueueUrl {
    url: EndpointUrl,
    region: String,
}

/// The longest SQS queue name (a FIFO queue's `.fifo` included).
const MAX_QUEUE_NAME: usize = 80;

impl SqsQueueUrl {
    /// A queue URL as AWS gives it: https, `sqs.<region>.amazonaws.com` (or
    /// `.amazonaws.com.cn`), no port, a 12-digit account and a queue name.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "url";
        let expected = "must be an SQS queue URL: https://sqs.<region>.amazonaws.com/<account id>/<queue name>";
        let url = EndpointUrl::parse(text)?;
        let parsed = url.as_url();
        if parsed.scheme() != "https" || parsed.port().is_some() || parsed.query().is_some() {
            return Err(ValidationError::new(field, expected));
        }
        let host = parsed.host_str().unwrap_or_default();
        let region = host
            .strip_suffix(".amazonaws.com")
            .or_else(|| host.strip_suffix(".amazonaws.com.cn"))
            .and_then(|rest| rest.strip_prefix("sqs."))
            .filter(|region| is_region(region))
            .ok_or_else(|| ValidationError::new(field, expected))?
            .to_owned();
        let segments: Vec<&str> = parsed.path().trim_start_matches('/').split('/').collect();
        let [account, name] = segments.as_slice() else {
            return Err(ValidationError::new(field, expected));
        };
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValidationError::new(field, "the account id in an SQS queue URL must be 12 digits"));
        }
        let base = name.strip_suffix(".fifo").unwrap_or(name);
        let valid_name = !base.is_empty()
            && name.len() <= MAX_QUEUE_NAME
            && base.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid_name {
            return Err(ValidationError::new(
                field,
                "an SQS queue name is 1 to 80 letters, digits, `-` or `_` (a FIFO queue's ending in `.fifo`)",
            ));
        }
        Ok(Self { url, region })
    }

    pub fn as_str(&self) -> &str {
        self.url.as_str()
    }

    /// The URL, as the endpoint stores it.
    pub fn endpoint_url(&self) -> &EndpointUrl {
        &self.url
    }

    /// The region whose SQS service holds the queue.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// A FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.url.as_url().path().ends_with(".fifo")
    }
}

/// An IAM role in the customer's account that RelayOps assumes to reach an
/// AWS destination: `arn:<partition>:iam::<12-digit account>:role/<path/name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsRoleArn(String);

/// The longest role ARN IAM allows.
const MAX_ROLE_ARN: usize = 2048;

impl AwsRoleArn {
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let field = "aws_role_arn";
        let expected = "must be an IAM role ARN: arn:aws:iam::<account id>:role/<name>";
        if text.len() > MAX_ROLE_ARN {
            return Err(ValidationError::new(field, format!("must be at most {MAX_ROLE_ARN} characters")));
        }
        let mut parts = text.splitn(6, ':');
        let (Some("arn"), Some(partition), Some("iam"), Some(""), Some(account), Some(resource)) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ValidationError::new(field, expected));
        };
        if !matches!(partition, "aws" | "aws-cn" | "aws-us-gov") {
            return Err(ValidationError::new(field, "names no AWS partition (aws, aws-cn or aws-us-gov)"));
        }
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ValidationError::new(field, "the account id in a role ARN must be 12 digits"));
        }
        let name = resource.strip_prefix("role/").ok_or_else(|| ValidationError::new(field, expected))?;
        let valid = |b: u8| b.is_ascii_alphanumeric() || b"+=,.@_-/".contains(&b);
        if name.is_empty() || name.ends_with('/') || !name.bytes().all(valid) {
            return Err(ValidationError::new(field, "the role name may hold letters, digits and +=,.@_-/"));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `us-east-1`, `eu-central-2`, `us-gov-west-1`, `cn-north-1`, …: lowercase
/// words joined by `-`, ending in a number.
fn is_region(text: &str) -> bool {
    let mut parts = text.split('-');
    let number = parts.next_back().unwrap_or_default();
    let words: Vec<&str> = parts.collect();
    words.len() >= 2
        && words.iter().all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase()))
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_queue_urls_parse_with_their_region() {
        let standard = SqsQueueUrl::parse("https://sqs.eu-west-1.amazonaws.com/123456789012/orders").unwrap();
        assert_eq!(standard.region(), "eu-west-1");
        assert!(!standard.is_fifo());
        let fifo = SqsQueueUrl::parse("https://sqs.us-gov-west-1.amazonaws.com/123456789012/orders_2.fifo").unwrap();
        assert_eq!(fifo.region(), "us-gov-west-1");
        assert!(fifo.is_fifo());
        let china = SqsQueueUrl::parse("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q").unwrap();
        assert_eq!(china.region(), "cn-north-1");
        // Host names are case-insensitive: kept as the URL parser spells them.
        let shouted = SqsQueueUrl::parse("https://SQS.EU-WEST-1.AMAZONAWS.COM/123456789012/Orders").unwrap();
        assert_eq!(shouted.as_str(), "https://sqs.eu-west-1.amazonaws.com/123456789012/Orders");
        assert_eq!(shouted.region(), "eu-west-1");
    }

    #[test]
    fn anything_but_an_aws_queue_url_is_refused() {
        for text in [
            "http://sqs.eu-west-1.amazonaws.com/123456789012/orders",
            "https://sqs.eu-west-1.amazonaws.com:8443/123456789012/orders",
            "https://evil.example/123456789012/orders",
            "https://sqs.eu-west-1.amazonaws.com.evil.example/123456789012/orders",
            "https://sqs.amazonaws.com/123456789012/orders",
            "https://sqs.eu-west-1.amazonaws.com/12345/orders",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/a/b",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/orders?x=1",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/or%20ders",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/.fifo",
        ] {
            assert!(SqsQueueUrl::parse(text).is_err(), "{text} was accepted");
        }
        let long = format!("https://sqs.eu-west-1.amazonaws.com/123456789012/{}", "q".repeat(81));
        assert!(SqsQueueUrl::parse(&long).is_err());
    }

    #[test]
    fn role_arns_name_an_iam_role_in_a_partition() {
        for text in [
            "arn:aws:iam::123456789012:role/relayops-sender",
            "arn:aws-cn:iam::123456789012:role/team/relayops+sender@x",
            "arn:aws-us-gov:iam::123456789012:role/a",
        ] {
            assert_eq!(AwsRoleArn::parse(text).unwrap().as_str(), text);
        }
        for text in [
            "arn:aws:iam::123456789012:user/someone",
            "arn:aws:iam::12345:role/r",
            "arn:aws:sts::123456789012:role/r",
            "arn:azure:iam::123456789012:role/r",
            "arn:aws:iam::123456789012:role/",
            "arn:aws:iam::123456789012:role/r r",
            "arn:aws:iam:eu-west-1:123456789012:role/r",
            "role/r",
        ] {
            assert!(AwsRoleArn::parse(text).is_err(), "{text} was accepted");
        }
    }

    #[test]
    fn destinations_round_trip_through_their_stored_names() {
        for destination in [Destination::Webhook, Destination::AwsSqs] {
            assert_eq!(Destination::from_stored(destination.as_str()), destination);
        }
    }
}
