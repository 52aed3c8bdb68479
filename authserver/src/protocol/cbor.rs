//! A small, bounded CBOR reader (RFC 8949) for what WebAuthn sends: attestation objects and COSE
//! keys. Definite lengths only, no tags, no floats; nesting, item counts and lengths are bounded
//! and checked against the input before anything is allocated, so hostile input is an error,
//! never a panic or a large allocation.

/// Deepest nesting accepted (an attestation object holds a map in a map).
const MAX_DEPTH: usize = 6;
/// Most data items in one decoded value.
const MAX_ITEMS: usize = 512;

/// A decoded data item; byte and text strings borrow from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value<'a> {
    /// An integer, major types 0 and 1 (−2⁶⁴ … 2⁶⁴−1).
    Integer(i128),
    Bytes(&'a [u8]),
    Text(&'a str),
    Array(Vec<Value<'a>>),
    Map(Vec<(Value<'a>, Value<'a>)>),
    Bool(bool),
    Null,
}

/// Why a CBOR input was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CborError {
    /// The input ends inside an item.
    Truncated,
    /// An indefinite length, a reserved additional value, a tag, a float or another unsupported
    /// simple value.
    Unsupported,
    /// Nested deeper, or more items, than accepted.
    TooLarge,
    /// A text string that is not UTF-8.
    BadText,
    /// A map with the same key twice.
    DuplicateKey,
    /// Bytes after the item where there must be none.
    TrailingBytes,
}

impl<'a> Value<'a> {
    /// The value of `key` in a map (`None` for another kind of value).
    pub fn get(&self, key: &Value<'_>) -> Option<&Value<'a>> {
        match self {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of integer key `key` in a map (COSE keys).
    pub fn get_int(&self, key: i128) -> Option<&Value<'a>> {
        self.get(&Value::Integer(key))
    }

    /// The value of text key `key` in a map.
    pub fn get_text(&self, key: &str) -> Option<&Value<'a>> {
        self.get(&Value::Text(key))
    }

    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&'a str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_integer(&self) -> Option<i128> {
        match self {
            Value::Integer(n) => Some(*n),
            _ => None,
        }
    }
}

/// Decodes exactly one item filling `input`.
pub fn decode(input: &[u8]) -> Result<Value<'_>, CborError> {
    let (value, used) = decode_prefix(input)?;
    if used == input.len() {
        Ok(value)
    } else {
        Err(CborError::TrailingBytes)
    }
}

/// Decodes the item at the start of `input`: the item and how many bytes it took (a COSE key in
/// authenticator data is followed by other bytes).
pub fn decode_prefix(input: &[u8]) -> Result<(Value<'_>, usize), CborError> {
    let mut reader = Reader {
        input,
        at: 0,
        items: 0,
    };
    let value = reader.item(0)?;
    Ok((value, reader.at))
}

struct Reader<'a> {
    input: &'a [u8],
    at: usize,
    items: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CborError> {
        let end = self.at.checked_add(n).ok_or(CborError::Truncated)?;
        let bytes = self.input.get(self.at..end).ok_or(CborError::Truncated)?;
        self.at = end;
        Ok(bytes)
    }

    /// The argument of a head whose additional information is `info`.
    fn argument(&mut self, info: u8) -> Result<u64, CborError> {
        Ok(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.take(1)?[0]),
            25 => u64::from(u16::from_be_bytes(
                self.take(2)?.try_into().map_err(|_| CborError::Truncated)?,
            )),
            26 => u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().map_err(|_| CborError::Truncated)?,
            )),
            27 => u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| CborError::Truncated)?),
            // 28–30 reserved, 31 indefinite length.
            _ => return Err(CborError::Unsupported),
        })
    }

    /// A length that must fit in what is left of the input (each element takes a byte at least).
    fn length(&mut self, info: u8) -> Result<usize, CborError> {
        let n = self.argument(info)?;
        let left = self.input.len() - self.at;
        usize::try_from(n)
            .ok()
            .filter(|n| *n <= left)
            .ok_or(CborError::Truncated)
    }

    fn item(&mut self, depth: usize) -> Result<Value<'a>, CborError> {
        if depth > MAX_DEPTH {
            return Err(CborError::TooLarge);
        }
        self.items += 1;
        if self.items > MAX_ITEMS {
            return Err(CborError::TooLarge);
        }
        let head = self.take(1)?[0];
        let (major, info) = (head >> 5, head & 0x1f);
        Ok(match major {
            0 => Value::Integer(i128::from(self.argument(info)?)),
            1 => Value::Integer(-1 - i128::from(self.argument(info)?)),
            2 => {
                let n = self.length(info)?;
                Value::Bytes(self.take(n)?)
            }
            3 => {
                let n = self.length(info)?;
                Value::Text(std::str::from_utf8(self.take(n)?).map_err(|_| CborError::BadText)?)
            }
            4 => {
                let n = self.length(info)?;
                let mut items = Vec::with_capacity(n.min(16));
                for _ in 0..n {
                    items.push(self.item(depth + 1)?);
                }
                Value::Array(items)
            }
            5 => {
                let n = self.length(info)?;
                let mut entries: Vec<(Value<'a>, Value<'a>)> = Vec::with_capacity(n.min(16));
                for _ in 0..n {
                    let key = self.item(depth + 1)?;
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(CborError::DuplicateKey);
                    }
                    let value = self.item(depth + 1)?;
                    entries.push((key, value));
                }
                Value::Map(entries)
            }
            7 => match info {
                20 => Value::Bool(false),
                21 => Value::Bool(true),
                22 => Value::Null,
                _ => return Err(CborError::Unsupported),
            },
            // 6: tags.
            _ => return Err(CborError::Unsupported),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_maps_of_integers_bytes_and_text() {
        // {1: 2, 3: -7, -1: 1, -2: h'0102', "fmt": "none", "a": [true, null]}
        let input = [
            0xa6, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21, 0x42, 0x01, 0x02, 0x63, b'f', b'm',
            b't', 0x64, b'n', b'o', b'n', b'e', 0x61, b'a', 0x82, 0xf5, 0xf6,
        ];
        let value = decode(&input).unwrap();
        assert_eq!(value.get_int(1), Some(&Value::Integer(2)));
        assert_eq!(value.get_int(3), Some(&Value::Integer(-7)));
        assert_eq!(
            value.get_int(-2).and_then(Value::as_bytes),
            Some(&[1, 2][..])
        );
        assert_eq!(value.get_text("fmt").and_then(Value::as_text), Some("none"));
        assert_eq!(
            value.get_text("a"),
            Some(&Value::Array(vec![Value::Bool(true), Value::Null]))
        );
        // A prefix: the bytes after the item are left alone.
        let mut longer = input.to_vec();
        longer.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(decode_prefix(&longer).unwrap().1, input.len());
        assert_eq!(decode(&longer), Err(CborError::TrailingBytes));
    }

    #[test]
    fn hostile_input_is_refused_without_panic_or_allocation() {
        // A byte string claiming 2^64-1 bytes; an array claiming 2^32 items.
        assert_eq!(
            decode(&[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
            Err(CborError::Truncated)
        );
        assert_eq!(
            decode(&[0x9a, 0xff, 0xff, 0xff, 0xff]),
            Err(CborError::Truncated)
        );
        // Indefinite length, a tag, a float, reserved information.
        assert_eq!(decode(&[0x5f, 0xff]), Err(CborError::Unsupported));
        assert_eq!(decode(&[0xc2, 0x40]), Err(CborError::Unsupported));
        assert_eq!(decode(&[0xf9, 0x3c, 0x00]), Err(CborError::Unsupported));
        assert_eq!(decode(&[0x1c]), Err(CborError::Unsupported));
        // Nesting deeper than accepted: 100 arrays of one array.
        let mut deep = vec![0x81; 100];
        deep.push(0x00);
        assert_eq!(decode(&deep), Err(CborError::TooLarge));
        // Too many items: an array of 1000 zeros.
        let mut many = vec![0x99, 0x03, 0xe8];
        many.extend(std::iter::repeat_n(0x00, 1000));
        assert_eq!(decode(&many), Err(CborError::TooLarge));
        // A duplicate key, text that is not UTF-8, a truncated head, nothing at all.
        assert_eq!(
            decode(&[0xa2, 0x01, 0x00, 0x01, 0x00]),
            Err(CborError::DuplicateKey)
        );
        assert_eq!(decode(&[0x61, 0xff]), Err(CborError::BadText));
        assert_eq!(decode(&[0x19, 0x01]), Err(CborError::Truncated));
        assert_eq!(decode(&[]), Err(CborError::Truncated));
        // Every prefix of a valid item fails cleanly.
        let valid = [0xa2, 0x01, 0x42, 0xaa, 0xbb, 0x63, b'a', b'b', b'c', 0x80];
        for end in 0..valid.len() {
            assert!(decode(&valid[..end]).is_err(), "prefix of {end} bytes");
        }
        assert!(decode(&valid).is_ok());
    }
}
