//! An endpoint's destination as the API stores it. A webhook's URL is well
//! formed (`EndpointUrl`) and does not name a special address the
//! installation's outbound policy refuses — judged by the same function the
//! worker applies before sending (`AddressPolicy::check_destination`), with
//! the same allow-list, so a URL accepted here is refused at send time only if
//! the allow-list changed or its host name resolves inward then. An SQS
//! destination's URL is an AWS queue URL (`SqsQueueUrl`): it names a region's
//! SQS service, never an address of the customer's choosing; its role, if it
//! names one, is an IAM role ARN (`AwsRoleArn`).
use relayops_shared::api::{ApiError, ApiState};
use relayops_shared::domain::{AwsRoleArn, Destination, EndpointUrl, SqsQueueUrl, ValidationError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How an endpoint's deliveries leave: `webhook` (default), an HTTP POST to
/// its `url`; `aws_sqs`, `SendMessage` to the Amazon SQS queue whose URL is
/// its `url` (`https://sqs.<region>.amazonaws.com/<account id>/<queue>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DestinationView {
    #[default]
    Webhook,
    AwsSqs,
}

impl DestinationView {
    pub fn domain(self) -> Destination {
        match self {
            Self::Webhook => Destination::Webhook,
            Self::AwsSqs => Destination::AwsSqs,
        }
    }

    pub fn of(destination: Destination) -> Self {
        match destination {
            Destination::Webhook => Self::Webhook,
            Destination::AwsSqs => Self::AwsSqs,
        }
    }
}

/// Parses and checks an endpoint's URL for its destination (creation and
/// `PATCH`); a refused address is a 422 naming its range.
pub(crate) fn destination_url(state: &ApiState, destination: Destination, text: &str) -> Result<EndpointUrl, ApiError> {
    match destination {
        Destination::Webhook => webhook_url(state, text),
        Destination::AwsSqs => Ok(SqsQueueUrl::parse(text)?.endpoint_url().clone()),
    }
}

/// A role to assume for `destination`: AWS destinations only.
pub(crate) fn role_for(destination: Destination, text: Option<&str>) -> Result<Option<AwsRoleArn>, ApiError> {
    match (destination, text) {
        (_, None) => Ok(None),
        (Destination::Webhook, Some(_)) => {
            Err(ValidationError::new("aws_role_arn", "only an AWS destination (aws_sqs) assumes a role").into())
        }
        (Destination::AwsSqs, Some(text)) => Ok(Some(AwsRoleArn::parse(text)?)),
    }
}

fn webhook_url(state: &ApiState, text: &str) -> Result<EndpointUrl, ApiError> {
    let url = EndpointUrl::parse(text)?;
    state
        .outbound
        .check_destination(url.as_url())
        .map_err(|refused| ValidationError::new("url", refused.to_string()))?;
    Ok(url)
}
