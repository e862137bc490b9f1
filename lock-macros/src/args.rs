//! The attribute's arguments: `"name template", wait = "5s", lease = "10s",
//! kind = fair, client = <expr>, crate = "path"`.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitStr, Path, Token};

/// Which lock the function runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Read,
    Write,
}

/// The parsed arguments.
pub(crate) struct Args {
    pub(crate) template: LitStr,
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) kind: Kind,
    pub(crate) client: Option<Expr>,
    pub(crate) krate: Option<Path>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                "#[distributed_lock] needs the lock name first, e.g. #[distributed_lock(\"order:{id}\")]",
            ));
        }
        let template: LitStr = input.parse().map_err(|err| {
            syn::Error::new(
                err.span(),
                "expected the lock name as a string literal, e.g. \"order:{id}\"",
            )
        })?;
        let mut args = Args {
            template,
            wait: None,
            lease: None,
            kind: Kind::Mutex,
            client: None,
            krate: None,
        };
        let mut seen: Vec<String> = Vec::new();
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            // `crate` is a keyword: accept it as an option name.
            let name: Ident = if input.peek(Token![crate]) {
                let token: Token![crate] = input.parse()?;
                Ident::new("crate", token.span)
            } else {
                input.parse()?
            };
            let key = name.to_string();
            if seen.contains(&key) {
                return Err(syn::Error::new(
                    name.span(),
                    format!("`{key}` is given twice"),
                ));
            }
            input.parse::<Token![=]>()?;
            match key.as_str() {
                "wait" => args.wait = Some(duration(&input.parse()?)?),
                "lease" => {
                    let literal: LitStr = input.parse()?;
                    let lease = duration(&literal)?;
                    if lease.is_zero() {
                        return Err(syn::Error::new(
                            literal.span(),
                            "a lease must be longer than 0",
                        ));
                    }
                    args.lease = Some(lease);
                }
                "kind" => {
                    let kind: Ident = input.parse()?;
                    args.kind = match kind.to_string().as_str() {
                        "mutex" => Kind::Mutex,
                        "fair" => Kind::Fair,
                        "read" => Kind::Read,
                        "write" => Kind::Write,
                        other => {
                            return Err(syn::Error::new(
                                kind.span(),
                                format!(
                                    "unknown lock kind `{other}`: expected mutex, fair, read or write"
                                ),
                            ));
                        }
                    };
                }
                "client" => args.client = Some(input.parse()?),
                "crate" => {
                    let literal: LitStr = input.parse()?;
                    args.krate = Some(literal.parse()?);
                }
                _ => {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "unknown option `{key}`: expected wait, lease, kind, client or crate"
                        ),
                    ));
                }
            }
            seen.push(key);
        }
        Ok(args)
    }
}

/// Parses `"250ms"`, `"5s"`, `"2m"` or `"1h"`.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "ms" => number,
        "s" => number.checked_mul(1_000)?,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

fn duration(literal: &LitStr) -> syn::Result<Duration> {
    parse_duration(&literal.value()).ok_or_else(|| {
        syn::Error::new(
            literal.span(),
            "expected a duration such as \"250ms\", \"5s\", \"2m\" or \"1h\"",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        for bad in [
            "",
            "5",
            "s",
            "5 sec",
            "-1s",
            "1.5s",
            "99999999999999999999h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn options_parse_and_duplicates_are_refused() {
        let args: Args = syn::parse_str(r#""a:{x}", wait = "5s", kind = fair, crate = "::lock""#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.wait, Some(Duration::from_secs(5)));
        assert_eq!(args.kind, Kind::Fair);
        assert!(args.krate.is_some());
        let err = syn::parse_str::<Args>(r#""a", wait = "1s", wait = "2s""#).err();
        assert!(err.is_some_and(|e| e.to_string().contains("twice")));
        let err = syn::parse_str::<Args>(r#""a", colour = "red""#).err();
        assert!(err.is_some_and(|e| e.to_string().contains("unknown option")));
    }
}
