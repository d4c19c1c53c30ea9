//! The tamper-evident hash chain (R-6a). Each event's
//! `chainHash` is blake3 over the previous event's hash and the canonical form of the event
//! (type, id, sequence, event type and version, payload, metadata without `chainHash`), in
//! the canonical JSON of [`crate::canonical`].

use serde_json::Value;

use crate::canonical::canonical;

/// The `prevHash` of a stream's first event.
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The fields of one stored event that the chain covers.
pub(crate) struct Link<'a> {
    pub aggregate_type: &'a str,
    pub aggregate_id: &'a str,
    pub sequence: u64,
    pub event_type: &'a str,
    /// Event schema version.
    pub event_version: &'a str,
    pub payload: &'a Value,
    /// Metadata (its `chainHash` member is ignored).
    pub metadata: &'a Value,
}

/// The chain hash of an event, as lowercase hex.
pub(crate) fn chain_hash(link: &Link<'_>) -> String {
    let mut metadata = link.metadata.clone();
    if let Some(obj) = metadata.as_object_mut() {
        obj.remove("chainHash");
    }
    let body = serde_json::json!({
        "aggregateType": link.aggregate_type,
        "aggregateId": link.aggregate_id,
        "sequence": link.sequence,
        "eventType": link.event_type,
        "eventVersion": link.event_version,
        "payload": link.payload,
        "metadata": metadata,
    });
    blake3::hash(canonical(&body).as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_ignores_key_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{"b": [1, {"y": 2, "x": "é"}], "a": null}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a), r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#);
    }

    #[test]
    fn the_chain_hash_changes_with_the_payload_but_not_with_its_own_field() {
        let payload = serde_json::json!({"x": 1});
        let meta = serde_json::json!({"prevHash": GENESIS});
        let link = |p: &Value, m: &Value| {
            chain_hash(&Link {
                aggregate_type: "T",
                aggregate_id: "a",
                sequence: 1,
                event_type: "E",
                event_version: "1",
                payload: p,
                metadata: m,
            })
        };
        let h = link(&payload, &meta);
        let mut with_hash = meta.clone();
        with_hash["chainHash"] = Value::String(h.clone());
        assert_eq!(link(&payload, &with_hash), h);
        assert_ne!(link(&serde_json::json!({"x": 2}), &meta), h);
    }
}
