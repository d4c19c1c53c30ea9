//! The tamper-evident hash chain (R-6a). Each event's
//! `chainHash` is blake3 over the previous event's hash and the canonical form of the event
//! (type, id, sequence, event type and version, payload, metadata without `chainHash`), in
//! the canonical JSON of [`crate::canonical`].

use serde_json::Value;

use std::io::Write;

use crate::canonical::{write, write_key, write_object};

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

/// The chain hash of an event, as lowercase hex: the canonical form of
/// `{aggregateType, aggregateId, sequence, eventType, eventVersion, payload, metadata}` (its
/// keys written in sorted order here), streamed into the hasher without copying the event.
pub(crate) fn chain_hash(link: &Link<'_>) -> String {
    let mut hasher = blake3::Hasher::new();
    // blake3's writer never fails.
    let _ = write_link(link, &mut hasher);
    hasher.finalize().to_hex().to_string()
}

fn write_link<W: Write>(link: &Link<'_>, out: &mut W) -> std::io::Result<()> {
    let text = |out: &mut W, key: &str, value: &str| -> std::io::Result<()> {
        write_key(key, out)?;
        serde_json::to_writer(&mut *out, value).map_err(std::io::Error::other)
    };
    out.write_all(b"{")?;
    text(out, "aggregateId", link.aggregate_id)?;
    out.write_all(b",")?;
    text(out, "aggregateType", link.aggregate_type)?;
    out.write_all(b",")?;
    text(out, "eventType", link.event_type)?;
    out.write_all(b",")?;
    text(out, "eventVersion", link.event_version)?;
    out.write_all(b",")?;
    write_key("metadata", out)?;
    match link.metadata {
        Value::Object(map) => write_object(map.iter().filter(|(k, _)| k.as_str() != "chainHash"), out)?,
        other => write(other, out)?,
    }
    out.write_all(b",")?;
    write_key("payload", out)?;
    write(link.payload, out)?;
    out.write_all(b",")?;
    write_key("sequence", out)?;
    write!(out, "{}", link.sequence)?;
    out.write_all(b"}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical;

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

    #[test]
    fn the_chain_hash_is_blake3_over_the_canonical_form_of_the_whole_event() {
        let payload = serde_json::json!({"GoalCompleted": {"goalId": "g\u{e9}", "at": "2026-01-01T00:00:00Z", "n": [1, 2.5, null]}});
        let metadata = serde_json::json!({"tool": "t", "chainHash": "x", "prevHash": GENESIS, "a": {"z": 1, "b": true}});
        let link = Link {
            aggregate_type: "LearningJourney",
            aggregate_id: "j-\"1",
            sequence: 42,
            event_type: "GoalCompleted",
            event_version: "1",
            payload: &payload,
            metadata: &metadata,
        };
        let mut without = metadata.clone();
        without.as_object_mut().unwrap().remove("chainHash");
        let body = serde_json::json!({"aggregateType": link.aggregate_type, "aggregateId": link.aggregate_id, "sequence": 42,
            "eventType": link.event_type, "eventVersion": "1", "payload": payload, "metadata": without});
        assert_eq!(chain_hash(&link), blake3::hash(canonical(&body).as_bytes()).to_hex().to_string());
        let plain = serde_json::json!("not an object");
        let body = serde_json::json!({"aggregateType": link.aggregate_type, "aggregateId": link.aggregate_id, "sequence": 42,
            "eventType": link.event_type, "eventVersion": "1", "payload": payload, "metadata": plain});
        assert_eq!(chain_hash(&Link { metadata: &plain, ..link }), blake3::hash(canonical(&body).as_bytes()).to_hex().to_string());
    }
}
