//! A serde `Deserializer` over the positioned YAML tree.
//!
//! Typed structs derive `Deserialize` as usual (with `deny_unknown_fields`); this
//! deserializer feeds them from [`Node`]s and tags every error with the span and path of
//! the node where it happened, so a wrong type, an unknown key, a missing key or a bad
//! enum value all come back as `file:line:column`. Errors are structured
//! ([`DeErrorKind`]) so the loader can word the message and its hint.

use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};

use crate::yaml::{Entry, Kind, Node, Scalar, Seg, Span};

/// What went wrong.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeErrorKind {
    Custom(String),
    Type {
        expected: String,
        found: String,
    },
    UnknownKey {
        key: String,
        allowed: &'static [&'static str],
    },
    UnknownValue {
        value: String,
        allowed: &'static [&'static str],
    },
    MissingKey {
        key: &'static str,
    },
    /// A whole number outside what the field holds.
    OutOfRange {
        value: String,
        bounds: Box<(i128, i128)>,
    },
}

/// An error, with the span and path of the node it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeError {
    pub kind: DeErrorKind,
    pub span: Option<Span>,
    pub path: Option<Vec<Seg>>,
}

impl DeError {
    fn new(kind: DeErrorKind) -> DeError {
        DeError { kind, span: None, path: None }
    }
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            DeErrorKind::Custom(message) => f.write_str(message),
            DeErrorKind::Type { expected, found } => write!(f, "expected {expected}, found {found}"),
            DeErrorKind::UnknownKey { key, .. } => write!(f, "unknown key `{key}`"),
            DeErrorKind::UnknownValue { value, .. } => write!(f, "unknown value `{value}`"),
            DeErrorKind::MissingKey { key } => write!(f, "missing `{key}`"),
            DeErrorKind::OutOfRange { value, bounds } => write!(f, "{value} is outside {}..={}", bounds.0, bounds.1),
        }
    }
}

impl std::error::Error for DeError {}

fn describe_unexpected(unexpected: de::Unexpected<'_>) -> String {
    use de::Unexpected as U;
    match unexpected {
        U::Bool(b) => format!("`{b}`"),
        U::Unsigned(n) => format!("the number `{n}`"),
        U::Signed(n) => format!("the number `{n}`"),
        U::Float(n) => format!("the number `{n}`"),
        U::Char(c) => format!("the text `{c}`"),
        U::Str(s) => format!("the text `{}`", crate::yaml::shorten(s)),
        U::Unit | U::Option => "empty".to_string(),
        U::Seq => "a list".to_string(),
        U::Map => "a mapping".to_string(),
        other => other.to_string(),
    }
}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> DeError {
        DeError::new(DeErrorKind::Custom(msg.to_string()))
    }

    fn invalid_type(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> DeError {
        DeError::new(DeErrorKind::Type { expected: expected.to_string(), found: describe_unexpected(unexpected) })
    }

    fn invalid_value(unexpected: de::Unexpected<'_>, expected: &dyn de::Expected) -> DeError {
        DeError::new(DeErrorKind::Type { expected: expected.to_string(), found: describe_unexpected(unexpected) })
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> DeError {
        DeError::new(DeErrorKind::UnknownValue { value: variant.to_string(), allowed: expected })
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> DeError {
        DeError::new(DeErrorKind::UnknownKey { key: field.to_string(), allowed: expected })
    }

    fn missing_field(field: &'static str) -> DeError {
        DeError::new(DeErrorKind::MissingKey { key: field })
    }
}

/// Deserializes `T` from `node`, which sits at `path` in the document.
pub(crate) fn from_node<'a, T: de::Deserialize<'a>>(
    node: &'a Node,
    path: Vec<Seg>,
    key_span: Option<Span>,
) -> Result<T, DeError> {
    T::deserialize(De { node, path: Trail::Root(&path), key_span })
}

/// Where a node sits: the path from the caller plus the keys and indexes walked since,
/// as borrowed links on the stack. Only an error turns it into a `Vec<Seg>`, so a value
/// that deserializes allocates nothing for its path.
#[derive(Clone, Copy)]
enum Trail<'p> {
    Root(&'p [Seg]),
    Key(&'p Trail<'p>, &'p str),
    Index(&'p Trail<'p>, usize),
}

impl Trail<'_> {
    fn to_vec(self) -> Vec<Seg> {
        let mut out = Vec::new();
        self.push_into(&mut out);
        out
    }

    fn push_into(self, out: &mut Vec<Seg>) {
        match self {
            Trail::Root(base) => out.extend_from_slice(base),
            Trail::Key(parent, key) => {
                parent.push_into(out);
                out.push(Seg::Key(key.to_string()));
            }
            Trail::Index(parent, i) => {
                parent.push_into(out);
                out.push(Seg::Index(i));
            }
        }
    }
}

/// The deserializer for one node.
pub(crate) struct De<'a, 'p> {
    node: &'a Node,
    path: Trail<'p>,
    /// The span of the key this node is the value of, for "missing key" errors.
    key_span: Option<Span>,
}

impl<'a, 'p> De<'a, 'p> {
    /// Fills in the span and path of an error raised at this node.
    fn locate(&self, mut err: DeError) -> DeError {
        if err.span.is_none() {
            err.span = Some(match (&err.kind, self.key_span) {
                (DeErrorKind::MissingKey { .. }, Some(key_span)) => key_span,
                _ => self.node.span,
            });
        }
        if err.path.is_none() {
            err.path = Some(self.path.to_vec());
        }
        err
    }

    fn type_error(&self, expected: &str) -> DeError {
        self.locate(DeError::new(DeErrorKind::Type { expected: expected.to_string(), found: self.node.describe() }))
    }

    fn int(&self, min: i128, max: i128, expected: &str) -> Result<i64, DeError> {
        let out_of_range = |value: &str| {
            self.locate(DeError::new(DeErrorKind::OutOfRange {
                value: value.to_string(),
                bounds: Box::new((min, max)),
            }))
        };
        match &self.node.kind {
            Kind::Scalar { value: Scalar::Int(n), .. } if (min..=max).contains(&i128::from(*n)) => Ok(*n),
            Kind::Scalar { value: Scalar::Int(n), .. } => Err(out_of_range(&n.to_string())),
            // Digits too many for 64 bits: the core schema made it a float.
            Kind::Scalar { value: Scalar::Float(_), raw, style: crate::yaml::Style::Plain }
                if raw.strip_prefix(['-', '+']).unwrap_or(raw).bytes().all(|b| b.is_ascii_digit()) =>
            {
                Err(out_of_range(raw))
            }
            _ => Err(self.type_error(expected)),
        }
    }

    fn seq_access(&self, items: &'a [Node]) -> SeqAccess<'a, 'p> {
        SeqAccess { items: items.iter().enumerate(), path: self.path }
    }

    fn map_access(&self, entries: &'a [Entry]) -> MapAccess<'a, 'p> {
        MapAccess { entries: entries.iter(), value: None, path: self.path }
    }
}

macro_rules! int_method {
    ($method:ident, $visit:ident, $ty:ty, $expected:expr) => {
        fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
            let n = self.int(i128::from(<$ty>::MIN), i128::from(<$ty>::MAX), $expected)?;
            match <$ty>::try_from(n) {
                Ok(n) => visitor.$visit(n).map_err(|e| self.locate(e)),
                Err(_) => Err(self.type_error($expected)),
            }
        }
    };
}

impl<'a> de::Deserializer<'a> for De<'a, '_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Scalar { value, .. } => match value {
                Scalar::Null => visitor.visit_unit(),
                Scalar::Bool(b) => visitor.visit_bool(*b),
                Scalar::Int(n) => visitor.visit_i64(*n),
                Scalar::Float(f) => visitor.visit_f64(*f),
                Scalar::Str(s) => visitor.visit_borrowed_str(s),
            },
            Kind::Seq(items) => visitor.visit_seq(self.seq_access(items)),
            Kind::Map(entries) => visitor.visit_map(self.map_access(entries)),
        };
        result.map_err(|e| self.locate(e))
    }

    int_method!(deserialize_u8, visit_u8, u8, "a whole number, 0 or more");
    int_method!(deserialize_u16, visit_u16, u16, "a whole number, 0 or more");
    int_method!(deserialize_u32, visit_u32, u32, "a whole number, 0 or more");
    int_method!(deserialize_u64, visit_u64, u64, "a whole number, 0 or more");
    int_method!(deserialize_i8, visit_i8, i8, "a whole number");
    int_method!(deserialize_i16, visit_i16, i16, "a whole number");
    int_method!(deserialize_i32, visit_i32, i32, "a whole number");
    int_method!(deserialize_i64, visit_i64, i64, "a whole number");

    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            #[allow(clippy::cast_precision_loss)]
            Kind::Scalar { value: Scalar::Int(n), .. } => visitor.visit_f64(*n as f64),
            Kind::Scalar { value: Scalar::Float(f), .. } => visitor.visit_f64(*f),
            _ => return Err(self.type_error("a number")),
        };
        result.map_err(|e| self.locate(e))
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Scalar { value: Scalar::Bool(b), .. } => visitor.visit_bool(*b).map_err(|e| self.locate(e)),
            _ => Err(self.type_error("`true` or `false`")),
        }
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        let result = match &self.node.kind {
            Kind::Scalar { value: Scalar::Str(s), .. } => visitor.visit_borrowed_str(s),
            // A number or boolean where text is expected is taken as written.
            Kind::Scalar { value: Scalar::Null, .. } => return Err(self.type_error("text")),
            Kind::Scalar { raw, .. } => visitor.visit_borrowed_str(raw),
            _ => return Err(self.type_error("text")),
        };
        result.map_err(|e| self.locate(e))
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Scalar { value: Scalar::Null, .. } => visitor.visit_none().map_err(|e| self.locate(e)),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Scalar { value: Scalar::Null, .. } => visitor.visit_unit().map_err(|e| self.locate(e)),
            _ => Err(self.type_error("nothing")),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(self, _name: &'static str, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(self, _name: &'static str, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Seq(items) => visitor.visit_seq(self.seq_access(items)).map_err(|e| self.locate(e)),
            _ => Err(self.type_error("a list")),
        }
    }

    fn deserialize_tuple<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Map(entries) => visitor.visit_map(self.map_access(entries)).map_err(|e| self.locate(e)),
            _ => Err(self.type_error("a mapping")),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Map(entries) => visitor.visit_map(self.map_access(entries)).map_err(|e| self.locate(e)),
            _ => {
                let keys: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
                Err(self.type_error(&format!("a mapping with the keys {}", keys.join(", "))))
            }
        }
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        match &self.node.kind {
            Kind::Scalar { value: Scalar::Str(s), .. } => {
                visitor.visit_enum(UnitEnum { variant: s }).map_err(|e| self.locate(e))
            }
            _ => {
                let names: Vec<String> = variants.iter().map(|v| format!("`{v}`")).collect();
                Err(self.type_error(&format!("one of {}", names.join(", "))))
            }
        }
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        visitor.visit_unit()
    }

    fn deserialize_i128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_u128<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_bytes<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }
}

struct SeqAccess<'a, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'a, Node>>,
    path: Trail<'p>,
}

impl<'a> de::SeqAccess<'a> for SeqAccess<'a, '_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            None => Ok(None),
            Some((i, node)) => {
                seed.deserialize(De { node, path: Trail::Index(&self.path, i), key_span: None }).map(Some)
            }
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct MapAccess<'a, 'p> {
    entries: std::slice::Iter<'a, Entry>,
    value: Option<&'a Entry>,
    path: Trail<'p>,
}

impl<'a> de::MapAccess<'a> for MapAccess<'a, '_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            None => Ok(None),
            Some(entry) => {
                self.value = Some(entry);
                let key = de::value::BorrowedStrDeserializer::<DeError>::new(entry.key.as_str());
                seed.deserialize(key).map(Some).map_err(|mut e| {
                    e.span.get_or_insert(entry.key_span);
                    e.path.get_or_insert_with(|| self.path.to_vec());
                    e
                })
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        match self.value.take() {
            Some(entry) => {
                let path = Trail::Key(&self.path, entry.key.as_str());
                seed.deserialize(De { node: &entry.value, path, key_span: Some(entry.key_span) })
            }
            None => Err(de::Error::custom("a mapping value was read before its key")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

struct UnitEnum<'a> {
    variant: &'a str,
}

impl<'a> de::EnumAccess<'a> for UnitEnum<'a> {
    type Error = DeError;
    type Variant = UnitOnly;

    fn variant_seed<V: DeserializeSeed<'a>>(self, seed: V) -> Result<(V::Value, UnitOnly), DeError> {
        let name = de::value::BorrowedStrDeserializer::<DeError>::new(self.variant);
        Ok((seed.deserialize(name)?, UnitOnly))
    }
}

struct UnitOnly;

impl<'a> de::VariantAccess<'a> for UnitOnly {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'a>>(self, _seed: T) -> Result<T::Value, DeError> {
        Err(de::Error::custom("expected a single word"))
    }

    fn tuple_variant<V: Visitor<'a>>(self, _len: usize, _visitor: V) -> Result<V::Value, DeError> {
        Err(de::Error::custom("expected a single word"))
    }

    fn struct_variant<V: Visitor<'a>>(
        self,
        _fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, DeError> {
        Err(de::Error::custom("expected a single word"))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::yaml::parse;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        n: u32,
        #[serde(default)]
        tags: Vec<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        inner: Inner,
        value: Option<serde_json::Value>,
    }

    fn load(text: &str) -> Result<Outer, DeError> {
        let node = parse(text).unwrap().0.unwrap();
        let node: &'static Node = Box::leak(Box::new(node));
        from_node(node, Vec::new(), None)
    }

    #[test]
    fn reads_typed_values() {
        let outer = load("name: x\ninner: { n: 3, tags: [a, 2] }\nvalue: { k: [1, 2.5, null, yes] }\n").unwrap();
        assert_eq!(outer.inner, Inner { n: 3, tags: vec!["a".into(), "2".into()] });
        assert_eq!(outer.value, Some(serde_json::json!({ "k": [1, 2.5, null, "yes"] })));
    }

    #[test]
    fn type_errors_point_at_the_value() {
        let err = load("name: x\ninner:\n  n: lots\n").unwrap_err();
        assert_eq!(err.span.unwrap().start.line, 3);
        assert_eq!(err.span.unwrap().start.col, 5);
        assert_eq!(err.path.unwrap(), vec![Seg::key("inner"), Seg::key("n")]);
        assert!(matches!(err.kind, DeErrorKind::Type { .. }));
    }

    #[test]
    fn unknown_keys_point_at_the_key() {
        let err = load("name: x\ninner:\n  n: 1\n  colour: red\n").unwrap_err();
        assert_eq!(err.span.unwrap().start.line, 4);
        assert_eq!(err.path.unwrap(), vec![Seg::key("inner")]);
        assert!(matches!(err.kind, DeErrorKind::UnknownKey { ref key, .. } if key == "colour"));
    }

    #[test]
    fn missing_keys_point_at_the_parent_key() {
        let err = load("name: x\ninner:\n  tags: []\n").unwrap_err();
        assert_eq!(err.span.unwrap().start.line, 2);
        assert!(matches!(err.kind, DeErrorKind::MissingKey { key: "n" }));
    }
}
