//! Canonical JSON and the hashes over it: the one byte form a value hashes to, whatever the
//! database or a client did to its key order and whitespace. Used by the hash chain, the
//! retry identities of the tools and the registry's seam signatures; it depends on nothing of
//! the service.

use serde_json::Value;

/// JSON with object keys sorted at every level and no insignificant whitespace, so the same
/// value hashes the same whatever the database did to its text.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(k) {
                    write(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A blake3 replay hash of a validated, canonicalised command input.
pub fn replay_hash(input: &Value) -> String {
    blake3::hash(canonical(input).as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_replay_hash_ignores_key_order() {
        let a = json!({"step": "recallGrading", "instance": 3, "payload": [true, false]});
        let b: Value = serde_json::from_str(r#"{ "payload":[true,false], "instance":3, "step":"recallGrading" }"#).unwrap();
        assert_eq!(replay_hash(&a), replay_hash(&b));
        assert_ne!(replay_hash(&a), replay_hash(&json!({"step": "recallGrading", "instance": 3, "payload": [false, true]})));
    }
}
