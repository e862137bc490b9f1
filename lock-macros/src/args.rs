//! The attribute's arguments: `"name template", wait = "5s", lease = "10s" (or
//! watchdog_lease = "10s"), kind = fair | semaphore(permits = N), client = <expr>,
//! crate = "path"`.

use std::time::Duration;

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

/// Which lock the function runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Read,
    Write,
    /// One permit of an expirable semaphore of this many permits.
    Semaphore(u64),
}

/// The parsed arguments.
pub(crate) struct Args {
    pub(crate) template: LitStr,
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    /// Whether `lease` came as `watchdog_lease`: renewed while the body runs.
    pub(crate) renewed: bool,
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
            renewed: false,
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
                "lease" | "watchdog_lease" => {
                    let other = if key == "lease" {
                        "watchdog_lease"
                    } else {
                        "lease"
                    };
                    if seen.iter().any(|given| given == other) {
                        return Err(syn::Error::new(
                            name.span(),
                            "`lease` and `watchdog_lease` exclude each other: a `lease` is \
                             never renewed, a `watchdog_lease` is renewed while the body runs",
                        ));
                    }
                    let literal: LitStr = input.parse()?;
                    let lease = duration(&literal)?;
                    if lease.is_zero() {
                        return Err(syn::Error::new(
                            literal.span(),
                            "a lease must be longer than 0",
                        ));
                    }
                    args.lease = Some(lease);
                    args.renewed = key == "watchdog_lease";
                }
                "kind" => args.kind = kind(input)?,
                "client" => args.client = Some(input.parse()?),
                "crate" => {
                    let literal: LitStr = input.parse()?;
                    args.krate = Some(literal.parse()?);
                }
                _ => {
                    return Err(syn::Error::new(
                        name.span(),
                        format!(
                            "unknown option `{key}`: expected wait, lease, watchdog_lease, kind, client \
                             or crate"
                        ),
                    ));
                }
            }
            seen.push(key);
        }
        Ok(args)
    }
}

/// Parses a kind: `mutex`, `fair`, `read`, `write` or `semaphore(permits = N)`.
fn kind(input: ParseStream<'_>) -> syn::Result<Kind> {
    let kind: Ident = input.parse()?;
    Ok(match kind.to_string().as_str() {
        "mutex" => Kind::Mutex,
        "fair" => Kind::Fair,
        "read" => Kind::Read,
        "write" => Kind::Write,
        "semaphore" => Kind::Semaphore(semaphore_permits(&kind, input)?),
        other => {
            return Err(syn::Error::new(
                kind.span(),
                format!(
                    "unknown lock kind `{other}`: expected mutex, fair, read, write or semaphore(permits = N)"
                ),
            ));
        }
    })
}

/// The `(permits = N)` after `semaphore`: N at least 1 and a signed 64-bit count.
fn semaphore_permits(kind: &Ident, input: ParseStream<'_>) -> syn::Result<u64> {
    let missing = || {
        syn::Error::new(
            kind.span(),
            "a semaphore needs its size: `kind = semaphore(permits = N)`",
        )
    };
    if !input.peek(syn::token::Paren) {
        return Err(missing());
    }
    let content;
    syn::parenthesized!(content in input);
    let key: Ident = content.parse().map_err(|_| missing())?;
    if key != "permits" {
        return Err(syn::Error::new(
            key.span(),
            format!("unknown semaphore option `{key}`: expected `permits = N`"),
        ));
    }
    content.parse::<Token![=]>()?;
    let count: LitInt = content.parse()?;
    if !content.is_empty() {
        return Err(content.error("expected only `permits = N`"));
    }
    match count.base10_parse::<u64>() {
        Ok(permits) if permits >= 1 && i64::try_from(permits).is_ok() => Ok(permits),
        _ => Err(syn::Error::new(
            count.span(),
            "permits must be a whole number from 1 to i64::MAX",
        )),
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

    #[test]
    fn a_semaphore_kind_carries_its_permits() {
        let args: Args = syn::parse_str(r#""pool", kind = semaphore(permits = 3), wait = "1s""#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(args.kind, Kind::Semaphore(3));
        for bad in [
            r#""p", kind = semaphore"#,
            r#""p", kind = semaphore()"#,
            r#""p", kind = semaphore(permits = 0)"#,
            r#""p", kind = semaphore(permits = 2, extra = 1)"#,
        ] {
            assert!(syn::parse_str::<Args>(bad).is_err(), "{bad}");
        }
    }
}
