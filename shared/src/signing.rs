//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>):
//! `webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`,
//! several space-separated when more than one secret is active.
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::SigningSecret;

pub const HEADER_ID: &str = "webhook-id";
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
pub const HEADER_SIGNATURE: &str = "webhook-signature";
pub const HEADER_DELIVERY_ID: &str = "x-relayops-delivery-id";
pub const HEADER_EVENT_ID: &str = "x-relayops-event-id";
pub const HEADER_EVENT_TYPE: &str = "x-relayops-event-type";
pub const HEADER_ATTEMPT: &str = "x-relayops-attempt";

fn mac(secret: &SigningSecret, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.key()).unwrap_or_else(|_| unreachable!());
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The `webhook-signature` header value for all active secrets.
pub fn sign(secrets: &[&SigningSecret], id: &str, timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| format!("v1,{}", STANDARD.encode(mac(secret, id, timestamp, body).finalize().into_bytes())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// True when any `v1` signature in the header verifies with `secret`
/// (constant-time comparison).
pub fn verify(secret: &SigningSecret, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
    header.split(' ').filter_map(|part| part.strip_prefix("v1,")).any(|encoded| {
        STANDARD
            .decode(encoded)
            .map(|signature| mac(secret, id, timestamp, body).verify_slice(&signature).is_ok())
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_webhooks_reference_vector() {
        // The example from the Standard Webhooks specification.
        let secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        let header = sign(&[&secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body);
        assert_eq!(header, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert!(verify(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body, &header));
        assert!(!verify(&secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265331, body, &header));
    }

    #[test]
    fn several_secrets_give_space_separated_signatures() {
        let old = SigningSecret::generate();
        let new = SigningSecret::generate();
        let header = sign(&[&new, &old], "dlv_1", 1, b"{}");
        assert_eq!(header.split(' ').count(), 2);
        assert!(verify(&old, "dlv_1", 1, b"{}", &header));
        assert!(verify(&new, "dlv_1", 1, b"{}", &header));
    }
}
