//! An endpoint URL as the API stores it: well formed (`EndpointUrl`), and not
//! naming a special address the installation's outbound policy refuses —
//! judged by the same function the worker applies before sending
//! (`AddressPolicy::check_destination`), with the same allow-list, so a URL
//! accepted here is refused at send time only if the allow-list changed or its
//! host name resolves inward then.
use relayops_shared::api::{ApiError, ApiState};
use relayops_shared::domain::{EndpointUrl, ValidationError};

/// Parses and checks an endpoint URL (creation and `PATCH`); a refused address
/// is a 422 naming its range.
pub(crate) fn endpoint_url(state: &ApiState, text: &str) -> Result<EndpointUrl, ApiError> {
    let url = EndpointUrl::parse(text)?;
    state
        .outbound
        .check_destination(url.as_url())
        .map_err(|refused| ValidationError::new("url", refused.to_string()))?;
    Ok(url)
}
