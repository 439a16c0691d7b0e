use serde_json::{json, Map, Value};

use super::*;
use crate::channel::message::ErrorCode;

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(map) => map,
        _ => unreachable!("tests pass objects"),
    }
}

fn refused(op: &str, v: Value) -> ErrorBody {
    match AgentRequest::parse(op, &args(v), Vec::new()) {
        Ok(request) => panic!("{op} was taken: {request:?}"),
        Err(e) => e,
    }
}

#[test]
fn every_op_is_found_by_its_name() {
    for op in AgentOp::ALL {
        assert_eq!(AgentOp::from_name(op.name()), Some(op));
    }
    assert_eq!(AgentOp::from_name("subscribe"), None);
}

#[test]
fn the_repeatable_ops_are_those_that_do_nothing_twice() {
    let repeatable: Vec<&str> = AgentOp::ALL
        .into_iter()
        .filter(|op| op.repeatable())
        .map(AgentOp::name)
        .collect();
    assert_eq!(
        repeatable,
        [
            "ping",
            "exec.start",
            "exec.cancel",
            "exec.status",
            "exec.list",
            "exec.notes",
            "exec.settle",
            "exec.read",
            "file.stat",
            "file.list",
            "file.read",
            "file.write",
            "file.mkdir",
            "file.glob",
            "file.grep",
            "watch.cancel",
            "watch.status",
            "watch.list",
            "task.start",
            "task.end",
            "task.status",
            "metrics.status",
            "metrics.set",
            "archive.create",
            "archive.read",
            "archive.write",
            "archive.remove",
        ]
    );
}

#[test]
fn an_unknown_op_is_refused_naming_op() {
    for op in ["nope", "file.nope", "subscribe", ""] {
        let e = refused(op, json!({}));
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(e.field.as_deref(), Some("op"));
        assert!(e.message.contains("unknown op"), "{e}");
    }
}

#[test]
fn bad_arguments_are_refused_naming_the_argument() {
    let cases = [
        ("exec.status", json!({}), "exec_id"),
        ("exec.status", json!({"exec_id": "ex-nope"}), "exec_id"),
        ("exec.read", json!({"exec_id": 7}), "exec_id"),
        ("metrics.set", json!({}), "interval_seconds"),
        (
            "metrics.set",
            json!({"interval_seconds": 0.1}),
            "interval_seconds",
        ),
        (
            "metrics.set",
            json!({"interval_seconds": 61}),
            "interval_seconds",
        ),
        (
            "exec.resize",
            json!({"exec_id": "ex-0123456789abcdef0123456789abcdef", "rows": 0, "cols": 80}),
            "rows",
        ),
        (
            "exec.cancel",
            json!({"exec_id": "ex-0123456789abcdef0123456789abcdef", "grace_seconds": -1}),
            "grace_seconds",
        ),
        ("exec.start", json!({"argv": []}), "command"),
        ("exec.start", json!({"steps": []}), "steps"),
        (
            "exec.start",
            json!({"steps": [{"argv": ["x"]}], "command": "y"}),
            "command",
        ),
        (
            "exec.start",
            json!({"steps": [{"argv": ["x"], "identity": "root"}]}),
            "steps[0].identity",
        ),
        ("exec.start", json!({"argv": ["x"], "env": {"A": 1}}), "env"),
        (
            "exec.start",
            json!({"argv": ["x"], "credential": {"base": "https://github.com", "token": "t"}}),
            "credential",
        ),
        (
            "exec.start",
            json!({"argv": ["x"], "internal": "yes"}),
            "internal",
        ),
        (
            "exec.start",
            json!({"argv": ["x"], "secret_env": {}}),
            "secret_env",
        ),
        (
            "exec.start",
            json!({"argv": ["x"], "report_metrics": 1}),
            "report_metrics",
        ),
        ("file.read", json!({}), "path"),
        ("file.grep", json!({"path": "."}), "pattern"),
        ("file.edit", json!({"path": "a"}), "old"),
        ("file.patch", json!({"format": "git"}), "format"),
        ("watch.start", json!({"kinds": ["explode"]}), "kinds"),
        (
            "watch.status",
            json!({"watch_id": "ex-0123456789abcdef0123456789abcdef"}),
            "watch_id",
        ),
    ];
    for (op, v, field) in cases {
        let e = refused(op, v);
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{op}: {e}");
        assert_eq!(e.field.as_deref(), Some(field), "{op}: {e}");
    }
}

#[test]
fn an_internal_exec_is_one_command_nobody_follows() {
    let id = "ex-0123456789abcdef0123456789abcdef";
    for extra in [
        json!({"pty": {"rows": 24, "cols": 80}}),
        json!({"note": {"repo_tags": {}}}),
    ] {
        let mut v = args(json!({"exec_id": id, "argv": ["git", "status"], "internal": true}));
        v.extend(args(extra));
        let e = refused("exec.start", Value::Object(v));
        assert_eq!(e.field.as_deref(), Some("internal"), "{e}");
    }
    let steps = json!({"internal": true, "steps": [{"argv": ["a"]}, {"argv": ["b"]}]});
    assert_eq!(
        refused("exec.start", steps).field.as_deref(),
        Some("internal")
    );
    let ok = json!({"exec_id": id, "argv": ["git", "status"], "internal": true});
    match AgentRequest::parse("exec.start", &args(ok), Vec::new()) {
        Ok(AgentRequest::ExecStart(start)) => assert!(start.internal),
        other => panic!("not taken: {other:?}"),
    }
}

#[test]
fn an_exec_reports_metrics_only_when_asked() {
    let start = |v: Value| match AgentRequest::parse("exec.start", &args(v), Vec::new()) {
        Ok(AgentRequest::ExecStart(start)) => start.report_metrics,
        other => panic!("not taken: {other:?}"),
    };
    assert!(!start(json!({"argv": ["x"]})));
    assert!(!start(json!({"argv": ["x"], "report_metrics": null})));
    assert!(start(json!({"argv": ["x"], "report_metrics": true})));
}

#[test]
fn terminal_sizes_out_of_bounds_are_refused_naming_rows_or_cols() {
    let id = "ex-0123456789abcdef0123456789abcdef";
    let start = |pty: Value| json!({"argv": ["sh"], "pty": pty});
    let resize = |rows: Value, cols: Value| json!({"exec_id": id, "rows": rows, "cols": cols});
    let cases = [
        ("exec.start", start(json!(true)), "pty"),
        (
            "exec.start",
            start(json!({"rows": 0, "cols": 80})),
            "pty.rows",
        ),
        (
            "exec.start",
            start(json!({"rows": 501, "cols": 80})),
            "pty.rows",
        ),
        (
            "exec.start",
            start(json!({"rows": "24", "cols": 80})),
            "pty.rows",
        ),
        (
            "exec.start",
            start(json!({"rows": 24, "cols": 1001})),
            "pty.cols",
        ),
        (
            "exec.start",
            start(json!({"rows": 24, "cols": 65_537})),
            "pty.cols",
        ),
        ("exec.start", start(json!({"rows": 24})), "pty.cols"),
        ("exec.resize", resize(json!(501), json!(80)), "rows"),
        ("exec.resize", resize(json!(-1), json!(80)), "rows"),
        ("exec.resize", resize(json!(24), json!(0)), "cols"),
        ("exec.resize", resize(json!(24), json!(1000.5)), "cols"),
        ("exec.resize", json!({"exec_id": id, "rows": 24}), "cols"),
    ];
    for (op, v, field) in cases {
        let e = refused(op, v.clone());
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{op} {v}: {e}");
        assert_eq!(e.field.as_deref(), Some(field), "{op} {v}: {e}");
        assert!(e.message.contains(field), "{e}");
    }
    for (rows, cols) in [(1, 1), (500, 1000)] {
        let Ok(AgentRequest::ExecStart(taken)) = AgentRequest::parse(
            "exec.start",
            &args(start(json!({"rows": rows, "cols": cols}))),
            vec![],
        ) else {
            panic!("{rows}x{cols} refused");
        };
        assert_eq!(
            taken.pty,
            Some(crate::agent::process::PtySize { rows, cols })
        );
        let taken = AgentRequest::parse(
            "exec.resize",
            &args(resize(rows.into(), cols.into())),
            vec![],
        );
        assert!(
            matches!(taken, Ok(AgentRequest::ExecResize(_))),
            "{taken:?}"
        );
    }
}

#[test]
fn a_start_reads_its_steps_in_order_with_their_fields() {
    let v = json!({"steps": [
        {"identity": "agent", "argv": ["git", "fetch"], "env": {"A": "1"}},
        {"command": "echo hi", "workdir": "/workspace/src"},
    ], "timeout_seconds": 0});
    let Ok(AgentRequest::ExecStart(start)) = AgentRequest::parse("exec.start", &args(v), vec![])
    else {
        panic!("not taken");
    };
    assert!(start.as_steps && !start.internal && start.timeout.is_none());
    assert_eq!(
        start.steps[0].identity,
        crate::agent::process::Identity::Agent
    );
    assert_eq!(start.steps[0].env, [("A".to_owned(), "1".to_owned())]);
    assert_eq!(start.steps[1].program, StepProgram::Shell("echo hi".into()));
    assert_eq!(start.steps[1].field("workdir"), "steps[1].workdir");
}

#[test]
fn client_paths_under_workspace_are_taken_relative_to_the_root() {
    for (given, taken) in [
        ("/workspace", "."),
        ("/workspace/", "."),
        ("/workspace/a/b", "a/b"),
        ("/workspace//a", "a"),
        ("/workspace/../etc", "../etc"),
        ("a/b", "a/b"),
        (".", "."),
        ("/workspaces/a", "/workspaces/a"),
        ("/srv/ws/a", "/srv/ws/a"),
    ] {
        assert_eq!(under_root(given), taken, "{given}");
    }
}

#[test]
fn an_escape_named_under_workspace_is_still_refused() {
    for path in ["/workspace/../etc/passwd", "/workspace/a/../../x"] {
        let e = crate::policy::workspace_path("/srv/ws", &under_root(path)).unwrap_err();
        assert_eq!(e.rule, "path.escapes-root", "{path}");
    }
}

#[test]
fn results_name_paths_under_workspace() {
    for (relative, shown) in [
        ("", "/workspace"),
        (".", "/workspace"),
        ("a", "/workspace/a"),
        ("a/b", "/workspace/a/b"),
        ("./a", "/workspace/a"),
        ("/a/", "/workspace/a"),
    ] {
        assert_eq!(shown_path(relative), shown, "{relative}");
    }
}

#[test]
fn port_connect_takes_a_preview_port_and_nothing_else() {
    match AgentRequest::parse("port.connect", &args(json!({"port": 8000})), Vec::new()) {
        Ok(AgentRequest::PortConnect(port)) => assert_eq!(port, 8000),
        other => panic!("port.connect was read as {other:?}"),
    }
    for bad in [
        json!({}),
        json!({"port": 22}),
        json!({"port": 0}),
        json!({"port": 65536}),
        json!({"port": -1}),
        json!({"port": "8000"}),
        json!({"port": u64::MAX}),
    ] {
        let e = refused("port.connect", bad.clone());
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        assert_eq!(e.field.as_deref(), Some("port"), "{bad}");
    }
}
