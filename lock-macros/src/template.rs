//! The lock-name template: `"order:{order_id}"` or `"user:{user.id}:cart"`, where each
//! `{...}` is a function argument or a field path on one, formatted with `Display`.
//! `{{` and `}}` stand for literal braces.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::LitStr;

/// One `{...}` part: the argument and the fields after it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub(crate) root: String,
    pub(crate) fields: Vec<String>,
}

/// Splits a template into the `format!` string and its parts.
pub(crate) fn split(template: &str) -> Result<(String, Vec<Part>), String> {
    let mut format = String::new();
    let mut parts = Vec::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                format.push_str("{{");
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                format.push_str("}}");
            }
            '{' => {
                let mut path = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => path.push(c),
                        None => return Err(format!("unclosed `{{{path}` in the lock name")),
                    }
                }
                let mut segments = path.trim().split('.').map(str::trim);
                let root = segments.next().unwrap_or("").to_owned();
                let fields: Vec<String> = segments.map(str::to_owned).collect();
                let valid = |s: &str| {
                    !s.is_empty()
                        && s.chars().all(|c| c.is_alphanumeric() || c == '_')
                        && !s.starts_with(|c: char| c.is_ascii_digit())
                };
                if !valid(&root)
                    || !fields
                        .iter()
                        .all(|f| valid(f) || f.parse::<usize>().is_ok())
                {
                    return Err(format!(
                        "`{{{path}}}` in the lock name: expected an argument or a field path such as {{order.id}}"
                    ));
                }
                format.push_str("{}");
                parts.push(Part { root, fields });
            }
            '}' => return Err("a lone `}` in the lock name: write `}}` for a brace".to_owned()),
            c => format.push(c),
        }
    }
    Ok((format, parts))
}

/// The expression that builds the name, checking every part against the arguments.
pub(crate) fn name_expression(template: &LitStr, arguments: &[String]) -> syn::Result<TokenStream> {
    let (format, parts) =
        split(&template.value()).map_err(|message| syn::Error::new(template.span(), message))?;
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        if !arguments.contains(&part.root) {
            let known = if arguments.is_empty() {
                "the function has no arguments".to_owned()
            } else {
                format!("arguments: {}", arguments.join(", "))
            };
            return Err(syn::Error::new(
                template.span(),
                format!(
                    "`{{{}}}` in the lock name is not an argument ({known})",
                    part.root
                ),
            ));
        }
        let root = if part.root == "self" {
            quote!(self)
        } else {
            let ident = format_ident!("{}", part.root);
            quote!(#ident)
        };
        let fields = part.fields.iter().map(|field| match field.parse::<u32>() {
            Ok(position) => {
                let index = syn::Index::from(position as usize);
                quote!(.#index)
            }
            Err(_) => {
                let ident = format_ident!("{}", field);
                quote!(.#ident)
            }
        });
        values.push(quote!(&#root #(#fields)*));
    }
    Ok(quote!(::std::format!(#format #(, #values)*)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_arguments_fields_and_escapes() {
        let (format, parts) = split("order:{order_id}:{user.profile.id}:{{x}}").unwrap();
        assert_eq!(format, "order:{}:{}:{{x}}");
        assert_eq!(
            parts[0],
            Part {
                root: "order_id".into(),
                fields: vec![]
            }
        );
        assert_eq!(
            parts[1],
            Part {
                root: "user".into(),
                fields: vec!["profile".into(), "id".into()]
            }
        );
    }

    #[test]
    fn refuses_malformed_templates() {
        for bad in ["a:{", "a:{}", "a:}", "a:{1x}", "a:{x-y}", "a:{x.}"] {
            assert!(split(bad).is_err(), "{bad}");
        }
    }
}
