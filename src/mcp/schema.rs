//! Our strict input validator (R-5a) and the JSON Schemas it publishes, from one description
//! per tool so the two cannot drift. Validation runs in the order of docs/tool-contract.md, errors on the raw
//! arguments: forbidden field names anywhere → unknown fields at any level (counted, never
//! named) → types, required fields and ranges (naming a known field, never echoing a value).

use serde_json::{json, Map, Value};

use crate::error::AppError;

/// Name stems of fields that would carry chat free text; matched case- and
/// separator-insensitively, also inside longer names (`lastFeedbackText`).
pub const FORBIDDEN_STEMS: &[&str] = &[
    "feedback",
    "explanation",
    "explain",
    "answer",
    "summary",
    "reason",
    "comment",
    "rationale",
    "justification",
    "transcript",
    "remark",
    "utterance",
    "message",
    "reply",
];

/// What a string must look like.
#[derive(Clone, Copy, Debug)]
pub enum Text {
    /// An opaque token copied unchanged (≤ 4 KiB, printable ASCII).
    Token,
    Uuid,
    /// A short identifier copied from a continuation (≤ 128, `[A-Za-z0-9_-]`).
    Ident,
}

/// The shape of a value.
#[derive(Clone, Debug)]
pub enum Shape {
    /// An object with exactly these fields (`additionalProperties: false`).
    Object(Vec<Field>),
    /// An array of items with bounds on its length.
    Array(Box<Shape>, usize, usize),
    String(Text),
    Bool,
    /// A non-negative integer.
    Count,
    /// A finite number ≥ 0.
    Points,
    /// One of these strings.
    Enum(&'static [&'static str]),
}

/// A named field.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    /// Whether it must be present.
    pub required: bool,
}

/// A required field.
pub fn req(name: &'static str, shape: Shape) -> Field {
    Field { name, shape, required: true }
}

/// An optional field.
pub fn opt(name: &'static str, shape: Shape) -> Field {
    Field { name, shape, required: false }
}

fn normalized(key: &str) -> String {
    key.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

/// Whether a key names free text.
pub fn is_forbidden(key: &str) -> bool {
    let k = normalized(key);
    FORBIDDEN_STEMS.iter().any(|stem| k.contains(stem))
}

fn any_forbidden(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.iter().any(|(k, v)| is_forbidden(k) || any_forbidden(v)),
        Value::Array(items) => items.iter().any(any_forbidden),
        _ => false,
    }
}

fn count_unknown(value: &Value, shape: &Shape) -> usize {
    match (value, shape) {
        (Value::Object(map), Shape::Object(fields)) => map
            .iter()
            .map(|(k, v)| match fields.iter().find(|f| f.name == k) {
                Some(f) => count_unknown(v, &f.shape),
                None => 1,
            })
            .sum(),
        (Value::Array(items), Shape::Array(item, _, _)) => items.iter().map(|v| count_unknown(v, item)).sum(),
        _ => 0,
    }
}

fn check(value: &Value, shape: &Shape, path: &str) -> Result<(), AppError> {
    let fail = || Err(AppError::ValidationFailed { field: path.to_owned() });
    match shape {
        Shape::Object(fields) => {
            let Value::Object(map) = value else { return fail() };
            for f in fields {
                let sub = if path.is_empty() { f.name.to_owned() } else { format!("{path}.{}", f.name) };
                match map.get(f.name) {
                    None | Some(Value::Null) if f.required => return Err(AppError::ValidationFailed { field: sub }),
                    None | Some(Value::Null) => {}
                    Some(v) => check(v, &f.shape, &sub)?,
                }
            }
            Ok(())
        }
        Shape::Array(item, min, max) => {
            let Value::Array(items) = value else { return fail() };
            if items.len() < *min || items.len() > *max {
                return fail();
            }
            for (i, v) in items.iter().enumerate() {
                check(v, item, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        Shape::String(kind) => {
            let Value::String(s) = value else { return fail() };
            let ok = match kind {
                Text::Token => !s.is_empty() && s.len() <= 4096 && s.bytes().all(|b| b.is_ascii_graphic()),
                Text::Uuid => uuid::Uuid::try_parse(s).is_ok() && s.len() == 36,
                Text::Ident => !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            };
            if ok {
                Ok(())
            } else {
                fail()
            }
        }
        Shape::Bool => {
            if value.is_boolean() {
                Ok(())
            } else {
                fail()
            }
        }
        Shape::Count => {
            if value.as_u64().is_some() {
                Ok(())
            } else {
                fail()
            }
        }
        Shape::Points => match value.as_f64() {
            Some(p) if p.is_finite() && p >= 0.0 && value.is_number() => Ok(()),
            _ => fail(),
        },
        Shape::Enum(options) => match value.as_str() {
            Some(s) if options.contains(&s) => Ok(()),
            _ => fail(),
        },
    }
}

/// Validates raw arguments against a tool's input shape, in the order of docs/tool-contract.md, errors.
pub fn validate(args: &Value, shape: &Shape) -> Result<(), AppError> {
    if any_forbidden(args) {
        return Err(AppError::ForbiddenField);
    }
    let unknown = count_unknown(args, shape);
    if unknown > 0 {
        return Err(AppError::UnknownField { count: unknown });
    }
    check(args, shape, "")
}

/// The JSON Schema of a shape (`additionalProperties: false` on every object).
pub fn json_schema(shape: &Shape) -> Value {
    match shape {
        Shape::Object(fields) => {
            let mut props = Map::new();
            for f in fields {
                props.insert(f.name.to_owned(), json_schema(&f.shape));
            }
            let required: Vec<&str> = fields.iter().filter(|f| f.required).map(|f| f.name).collect();
            json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
        }
        Shape::Array(item, min, max) => json!({"type": "array", "items": json_schema(item), "minItems": min, "maxItems": max}),
        Shape::String(Text::Uuid) => json!({"type": "string", "format": "uuid"}),
        Shape::String(Text::Token) => json!({"type": "string", "minLength": 1, "maxLength": 4096}),
        Shape::String(Text::Ident) => json!({"type": "string", "minLength": 1, "maxLength": 128}),
        Shape::Bool => json!({"type": "boolean"}),
        Shape::Count => json!({"type": "integer", "minimum": 0}),
        Shape::Points => json!({"type": "number", "minimum": 0}),
        Shape::Enum(options) => json!({"type": "string", "enum": options}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape::Object(vec![
            req("decision", Shape::Object(vec![req("evidence", Shape::Enum(&["independent", "guided"]))])),
            req("scores", Shape::Array(Box::new(Shape::Object(vec![req("points", Shape::Points)])), 1, 10)),
        ])
    }

    #[test]
    fn forbidden_names_are_found_in_any_spelling_at_any_depth() {
        for key in ["feedback", "LastFeedbackText", "work_feedback", "outcome-Feedback", "SUMMARY", "myReason"] {
            let args = json!({"decision": {"evidence": "guided", key: "x"}, "scores": [{"points": 1}]});
            assert!(matches!(validate(&args, &shape()), Err(AppError::ForbiddenField)), "{key}");
            let nested = json!({"decision": {"evidence": "guided"}, "scores": [{"points": 1, "extra": {key: 1}}]});
            assert!(matches!(validate(&nested, &shape()), Err(AppError::ForbiddenField)), "{key}");
        }
    }

    #[test]
    fn unknown_fields_are_counted_at_every_level() {
        let args = json!({"decision": {"evidence": "guided", "x": 1}, "scores": [{"points": 1, "y": 2}], "z": 3});
        assert!(matches!(validate(&args, &shape()), Err(AppError::UnknownField { count: 3 })));
    }

    #[test]
    fn wrong_types_name_the_known_field() {
        let args = json!({"decision": {"evidence": "brilliant"}, "scores": [{"points": 1}]});
        assert!(matches!(validate(&args, &shape()), Err(AppError::ValidationFailed { field }) if field == "decision.evidence"));
        let args = json!({"decision": {"evidence": "guided"}, "scores": [{"points": -1}]});
        assert!(matches!(validate(&args, &shape()), Err(AppError::ValidationFailed { field }) if field == "scores[0].points"));
    }

    #[test]
    fn published_schemas_forbid_additional_properties_everywhere() {
        let schema = json_schema(&shape());
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["decision"]["additionalProperties"], false);
        assert_eq!(schema["properties"]["scores"]["items"]["additionalProperties"], false);
    }
}

#[cfg(test)]
mod fuzz {
    //! Arbitrary tokens never open.
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn arbitrary_tokens_never_open(token in "[ -~]{0,300}") {
            let keys = crate::app::tokens::Keys::parse(&crate::app::tokens::Keys::generate_spec().unwrap()).unwrap();
            let now = chrono::Utc::now();
            prop_assert!(keys.open_option(&token, "s", "j", now).is_err());
            prop_assert!(keys.open_capability(&token, "s", "j", now).is_err());
            prop_assert!(keys.open_session(&token).is_err());
        }
    }
}
