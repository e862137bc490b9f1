//! The expansion: the user's function, unchanged on the outside, whose body runs under
//! the lock through the facade's `__private::run`.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::{
    Expr, ExprAsync, FnArg, GenericArgument, ItemFn, Pat, PathArguments, ReturnType, Stmt, Type,
    TypeParamBound,
};

use crate::args::{Args, Kind};
use crate::template;

/// Expands `#[distributed_lock(attr)] item`. On error, emits the error *and* the
/// function unchanged, so that the user sees only the real mistake.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let function: ItemFn = match syn::parse2::<ItemFn>(item.clone()) {
        Ok(function) => function,
        Err(err) => {
            let mut tokens = err.to_compile_error();
            tokens.extend(item);
            return tokens;
        }
    };
    match expand_fn(attr, &function) {
        Ok(tokens) => tokens,
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #function)
        }
    }
}

/// The names a template may use: the plain identifier arguments and `self`.
fn argument_names(function: &ItemFn) -> Vec<String> {
    function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Receiver(_) => Some("self".to_owned()),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(ident) => Some(ident.ident.to_string()),
                _ => None,
            },
        })
        .collect()
}

/// The function's result must be `Result<T, E>`.
fn check_result(function: &ItemFn, output: Option<&Type>) -> syn::Result<()> {
    let message = "#[distributed_lock] needs a function returning `Result<T, E>` \
                   with `E: From<distlock::Error>`: a busy or failed lock becomes `Err`";
    match output {
        Some(Type::Path(path))
            if path
                .path
                .segments
                .last()
                .is_some_and(|segment| segment.ident == "Result") =>
        {
            Ok(())
        }
        Some(other) => Err(syn::Error::new_spanned(other, message)),
        None => Err(syn::Error::new_spanned(&function.sig.ident, message)),
    }
}

/// The last type argument of a path type's last segment, if it is `name<..>`.
fn type_argument<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let segment = path.path.segments.last().filter(|s| s.ident == name)?;
    let PathArguments::AngleBracketed(args) = &segment.arguments else {
        return None;
    };
    args.args.iter().find_map(|arg| match arg {
        GenericArgument::Type(ty) => Some(ty),
        _ => None,
    })
}

/// A method `#[async_trait]` already rewrote: a plain `fn` returning
/// `Pin<Box<dyn Future<Output = T> + ..>>` whose body is `Box::pin(async move { .. })`.
/// Returns the async block and `T`.
fn async_trait_method(function: &ItemFn) -> Option<(&ExprAsync, &Type)> {
    if function.sig.asyncness.is_some() {
        return None;
    }
    let ReturnType::Type(_, ty) = &function.sig.output else {
        return None;
    };
    let Type::TraitObject(object) = type_argument(type_argument(ty, "Pin")?, "Box")? else {
        return None;
    };
    let output = object.bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let future = bound.path.segments.last().filter(|s| s.ident == "Future")?;
        let PathArguments::AngleBracketed(args) = &future.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(&assoc.ty),
            _ => None,
        })
    })?;
    let [Stmt::Expr(Expr::Call(call), None)] = function.block.stmts.as_slice() else {
        return None;
    };
    let Expr::Path(callee) = &*call.func else {
        return None;
    };
    if callee.path.segments.last().is_none_or(|s| s.ident != "pin") {
        return None;
    }
    match call.args.first() {
        Some(Expr::Async(body)) if call.args.len() == 1 => Some((body, output)),
        _ => None,
    }
}

fn millis(duration: Option<std::time::Duration>) -> TokenStream {
    match duration {
        Some(d) => {
            let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            quote!(::core::option::Option::Some(::core::time::Duration::from_millis(#ms)))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn expand_fn(attr: TokenStream, function: &ItemFn) -> syn::Result<TokenStream> {
    let args: Args = syn::parse2(attr)?;
    let async_trait = async_trait_method(function);
    if function.sig.asyncness.is_none() && async_trait.is_none() {
        return Err(syn::Error::new_spanned(
            function.sig.fn_token,
            "#[distributed_lock] needs an `async fn`: the lock is taken and released with I/O",
        ));
    }
    let output = match (&function.sig.output, async_trait) {
        (_, Some((_, output))) => Some(output),
        (ReturnType::Type(_, output), None) => Some(&**output),
        (ReturnType::Default, None) => None,
    };
    check_result(function, output)?;
    let name = template::name_expression(&args.template, &argument_names(function))?;
    let krate = args
        .krate
        .map_or_else(|| quote!(::distlock), ToTokens::into_token_stream);
    let client = match &args.client {
        // Method syntax, so that a `Locks` and a `&Locks` both give a `Locks`.
        Some(expr) => quote!(::core::option::Option::Some((#expr).clone())),
        None => quote!(#krate::__private::default_client()),
    };
    let kind = match args.kind {
        Kind::Mutex => quote!(#krate::__private::Kind::Mutex),
        Kind::Fair => quote!(#krate::__private::Kind::Fair),
        Kind::Read => quote!(#krate::__private::Kind::Read),
        Kind::Write => quote!(#krate::__private::Kind::Write),
        Kind::Semaphore(permits) => quote!(#krate::__private::Kind::Semaphore(#permits)),
    };
    let (wait, lease, renewed) = (millis(args.wait), millis(args.lease), args.renewed);
    let run = |body: TokenStream| {
        quote! {
            let __lock_name: ::std::string::String = #name;
            let __lock_client = #client;
            #krate::__private::run(__lock_client, #kind, __lock_name, #wait, (#lease, #renewed), #body)
                .await
        }
    };
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    if let Some((body, _)) = async_trait {
        // `#[async_trait]` made the body `Box::pin(async move { .. })`: that async block
        // runs under the lock, inside a new boxed block that takes it.
        let locked = run(body.to_token_stream());
        return Ok(quote! {
            #(#attrs)*
            #vis #sig {
                ::std::boxed::Box::pin(async move { #locked })
            }
        });
    }
    // The body keeps its own `return`s and `?`s: it becomes an async block whose output
    // type is pinned to the function's by its last expression.
    let locked = run(quote! {
        async move {
            // A body that always returns early or panics is the user's business.
            #[allow(clippy::diverging_sub_expression, unreachable_code)]
            let __lock_result: #output = #block;
            #[allow(unreachable_code)]
            __lock_result
        }
    });
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #locked
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(attr: &str, item: &str) -> String {
        expand(attr.parse().unwrap(), item.parse().unwrap()).to_string()
    }

    #[test]
    fn a_valid_function_runs_under_the_lock() {
        let out = expand_str(
            r#""order:{id}", wait = "5s""#,
            "pub async fn f(id: u64) -> Result<(), MyError> { Ok(()) }",
        );
        assert!(out.contains("__private :: run"), "{out}");
        assert!(out.contains("from_millis (5000u64)"), "{out}");
        assert!(!out.contains("compile_error"), "{out}");
    }

    #[test]
    fn an_async_trait_method_runs_its_boxed_body_under_the_lock() {
        let out = expand_str(
            r#""job:{id}""#,
            "fn f<'life0, 'async_trait>(&'life0 self, id: u32) \
             -> ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<u32, E>> \
             + ::core::marker::Send + 'async_trait>> \
             { Box::pin(async move { let __ret: Result<u32, E> = { Ok(id) }; __ret }) }",
        );
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("__private :: run"), "{out}");
        assert!(out.contains(":: std :: boxed :: Box :: pin"), "{out}");
        // A plain function returning a boxed future of something else is refused.
        let out = expand_str(
            r#""a""#,
            "fn f() -> Pin<Box<dyn Future<Output = u32> + Send>> { Box::pin(async move { 1 }) }",
        );
        assert!(
            out.contains("compile_error") && out.contains("Result"),
            "{out}"
        );
    }

    #[test]
    fn errors_keep_the_function() {
        for (attr, item, message) in [
            (r#""a""#, "fn f() -> Result<(), E> { Ok(()) }", "async fn"),
            (r#""a""#, "async fn f() -> u32 { 1 }", "Result"),
            (
                r#""a:{nope}""#,
                "async fn f(x: u8) -> Result<(), E> { Ok(()) }",
                "not an argument",
            ),
            (
                r#""a", colour = "red""#,
                "async fn f() -> Result<(), E> { Ok(()) }",
                "unknown option",
            ),
            (
                r#""a", wait = "soon""#,
                "async fn f() -> Result<(), E> { Ok(()) }",
                "duration",
            ),
        ] {
            let out = expand_str(attr, item);
            assert!(out.contains("compile_error"), "{item}: {out}");
            assert!(out.contains(message), "{item}: {out}");
            assert!(out.contains("fn f"), "the function was dropped: {out}");
        }
    }
}
