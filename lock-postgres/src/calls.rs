//! Calls of the schema's entry points with named arguments.
//!
//! Each value is sent beside the parameter it is for (`acquire(p_name => $1::text, ...)`),
//! so no argument can reach another parameter's place, and a parameter the function does
//! not have is an error the server gives at once: the SQL side of the Redis protocol's
//! declared script calls.

use tokio_postgres::types::{ToSql, Type};

/// A statement parameter and its type.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

/// One argument of an entry point: the function's parameter, the value, and the SQL type
/// it is sent as (with a cast where the function takes another: `text::uuid` for an id
/// sent as text).
#[derive(Clone, Copy)]
pub(crate) struct Arg<'a> {
    param: &'static str,
    value: &'a (dyn ToSql + Sync),
    sql: &'static str,
}

impl std::fmt::Debug for Arg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arg")
            .field("param", &self.param)
            .field("sql", &self.sql)
            .finish_non_exhaustive()
    }
}

/// The argument `value` for the parameter `param`, sent as `sql`.
pub(crate) fn arg<'a>(
    param: &'static str,
    value: &'a (dyn ToSql + Sync),
    sql: &'static str,
) -> Arg<'a> {
    Arg { param, value, sql }
}

/// The wire type of an argument sent as `sql` (its first type, before any cast).
fn wire_type(sql: &str) -> Type {
    // The type before the first `::` cast; a type name holds no colon, so the first one
    // starts the cast (a search for one character is far cheaper than for two).
    let first = sql.find(':').map_or(sql, |colon| &sql[..colon]);
    match first {
        "bigint" => Type::INT8,
        "integer" => Type::INT4,
        "boolean" => Type::BOOL,
        "text[]" => Type::TEXT_ARRAY,
        // Every other argument is text (the ids, cast to uuid by the statement).
        _ => Type::TEXT,
    }
}

/// `function(p_a => $1::type, ...)`, to follow `SELECT <schema>.`, and its typed
/// parameters in the order of the placeholders.
pub(crate) fn named<'a>(function: &str, args: &[Arg<'a>]) -> (String, Vec<Param<'a>>) {
    named_from(function, args, 1)
}

/// As [`named`], its placeholders numbered from `first` (a call that follows others in
/// one statement).
pub(crate) fn named_from<'a>(
    function: &str,
    args: &[Arg<'a>],
    first: usize,
) -> (String, Vec<Param<'a>>) {
    let mut call = String::with_capacity(function.len() + 2 + args.len() * 32);
    call.push_str(function);
    call.push('(');
    let mut params = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        if i > 0 {
            call.push_str(", ");
        }
        call.push_str(arg.param);
        call.push_str(" => $");
        call.push_str(&(first + i).to_string());
        call.push_str("::");
        call.push_str(arg.sql);
        params.push((arg.value, wire_type(arg.sql)));
    }
    call.push(')');
    (call, params)
}

/// The typed parameters of `args`, in the order of [`named`]'s placeholders.
pub(crate) fn params<'a>(args: &[Arg<'a>]) -> Vec<Param<'a>> {
    args.iter()
        .map(|arg| (arg.value, wire_type(arg.sql)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_is_named_by_its_parameter() {
        let (name, request, lease) = ("orders", "the request id", 30_000_i64);
        let (call, params) = named(
            "release",
            &[
                arg("p_name", &name, "text"),
                arg("p_grant", &request, "text::uuid"),
                arg("p_lease_ms", &lease, "bigint"),
            ],
        );
        assert_eq!(
            call,
            "release(p_name => $1::text, p_grant => $2::text::uuid, p_lease_ms => $3::bigint)"
        );
        let types: Vec<Type> = params.into_iter().map(|(_, ty)| ty).collect();
        assert_eq!(types, [Type::TEXT, Type::TEXT, Type::INT8]);
    }
}
