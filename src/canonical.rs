//! Canonical JSON and the hashes over it: the one byte form a value hashes to, whatever the
//! database or a client did to its key order and whitespace. Used by the hash chain, the
//! retry identities of the tools and the registry's seam signatures; it depends on nothing of
//! the service.

use serde_json::Value;

/// JSON with object keys sorted at every level and no insignificant whitespace, so the same
/// value hashes the same whatever the database did to its text.
pub fn canonical(value: &Value) -> String {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail, and serde_json writes only UTF-8.
    let _ = write(value, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// A blake3 hash over a value's canonical form, written into the hasher as it is produced
/// (no text of the whole value is built: hashing is on every commit's path).
pub fn canonical_hash(value: &Value) -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    // blake3's writer never fails.
    let _ = write(value, &mut hasher);
    hasher.finalize()
}

/// Writes a value's canonical form: keys and scalars exactly as serde_json's compact form
/// writes them, objects with their keys in sorted order.
pub fn write<W: std::io::Write>(value: &Value, out: &mut W) -> std::io::Result<()> {
    match value {
        Value::Object(map) => write_object(map.iter(), out),
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write(v, out)?;
            }
            out.write_all(b"]")
        }
        other => serde_json::to_writer(out, other).map_err(std::io::Error::other),
    }
}

/// Writes an object of these members, their keys in sorted order.
pub fn write_object<'a, W: std::io::Write>(members: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut W) -> std::io::Result<()> {
    let mut entries: Vec<(&String, &Value)> = members.collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.write_all(b"{")?;
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        write_key(k, out)?;
        write(v, out)?;
    }
    out.write_all(b"}")
}

/// Writes an object key and its colon.
pub fn write_key<W: std::io::Write>(key: &str, out: &mut W) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, key).map_err(std::io::Error::other)?;
    out.write_all(b":")
}

/// A blake3 replay hash of a validated, canonicalised command input.
pub fn replay_hash(input: &Value) -> String {
    canonical_hash(input).to_hex().to_string()
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

    #[test]
    fn the_canonical_form_sorts_keys_at_every_level_and_escapes_as_serde_json_does() {
        let v = json!({"b": [1, {"z": null, "a": "x\"y\n\u{e9}"}], "a": 1.5, "\u{1}k": true});
        assert_eq!(canonical(&v), "{\"\\u0001k\":true,\"a\":1.5,\"b\":[1,{\"a\":\"x\\\"y\\n\u{e9}\",\"z\":null}]}");
        assert_eq!(canonical_hash(&v), blake3::hash(canonical(&v).as_bytes()));
    }
}
