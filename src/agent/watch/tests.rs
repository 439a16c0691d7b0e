//! Watches, specified as tests: ordered events with root-relative paths (new subdirectories
//! included), renames as one event, every way a watch ends frees its slot, the bound holds.

use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use super::{
    EventKind, KindFilter, WatchEnd, WatchEvent, WatchMessage, WatchRegistry, WatchRequest,
};
use crate::agent::files::{FileErrorKind, Workspace, WriteOptions};

/// Generous: only a broken watch waits this long.
const PATIENCE: Duration = Duration::from_secs(20);

struct Fixture {
    base: std::path::PathBuf,
    registry: WatchRegistry,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let base = std::env::temp_dir().join(format!("mwc-watch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/w")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let ws = Arc::new(Workspace::open(base.join("root")).unwrap());
        Self {
            base,
            registry: WatchRegistry::new(ws, 2),
        }
    }

    fn at(&self, rel: &str) -> std::path::PathBuf {
        self.base.join("root").join(rel)
    }

    fn start(&self, req: WatchRequest) -> Receiver<WatchMessage> {
        let (tx, rx) = channel();
        self.registry
            .start(req, Box::new(move |m| drop(tx.send(m))))
            .unwrap();
        rx
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn next_event(rx: &Receiver<WatchMessage>) -> WatchEvent {
    match rx.recv_timeout(PATIENCE).expect("an event") {
        WatchMessage::Event(e) => e,
        WatchMessage::Ended(end) => panic!("the watch ended early: {end:?}"),
    }
}

fn ended(rx: &Receiver<WatchMessage>) -> WatchEnd {
    loop {
        if let WatchMessage::Ended(end) = rx.recv_timeout(PATIENCE).expect("the end") {
            return end;
        }
    }
}

fn ev(kind: EventKind, path: &str, is_dir: bool) -> WatchEvent {
    WatchEvent {
        kind,
        path: path.into(),
        from: None,
        is_dir,
    }
}

#[test]
fn events_arrive_in_order_with_root_relative_paths_even_in_a_new_subdirectory() {
    let fx = Fixture::new("order");
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::create_dir(fx.at("w/sub")).unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Create, "w/sub", true));
    std::fs::write(fx.at("w/sub/a.txt"), "hello").unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Create, "w/sub/a.txt", false));
    assert_eq!(next_event(&rx), ev(EventKind::Modify, "w/sub/a.txt", false));
    std::fs::rename(fx.at("w/sub/a.txt"), fx.at("w/b.txt")).unwrap();
    let rename = next_event(&rx);
    assert_eq!(rename.kind, EventKind::Rename);
    assert_eq!(
        (rename.from.as_deref(), rename.path.as_str()),
        (Some("w/sub/a.txt"), "w/b.txt")
    );
    std::fs::remove_file(fx.at("w/b.txt")).unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Remove, "w/b.txt", false));
    assert!(fx.registry.cancel("fw-1"));
    assert_eq!(ended(&rx), WatchEnd::Cancelled);
}

#[test]
fn a_renamed_directory_keeps_reporting_under_its_new_name() {
    let fx = Fixture::new("rename-dir");
    std::fs::create_dir_all(fx.at("w/old")).unwrap();
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::rename(fx.at("w/old"), fx.at("w/new")).unwrap();
    assert_eq!(next_event(&rx).path, "w/new");
    std::fs::write(fx.at("w/new/f"), "").unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Create, "w/new/f", false));
}

#[test]
fn a_move_out_of_the_tree_is_a_remove_and_a_move_in_is_a_create() {
    let fx = Fixture::new("move-out");
    std::fs::write(fx.at("w/f"), "").unwrap();
    std::fs::write(fx.at("elsewhere"), "").unwrap();
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::rename(fx.at("w/f"), fx.at("gone")).unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Remove, "w/f", false));
    std::fs::rename(fx.at("elsewhere"), fx.at("w/here")).unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Create, "w/here", false));
}

#[test]
fn the_kind_filter_drops_other_kinds() {
    let fx = Fixture::new("filter");
    let mut req = WatchRequest::new("fw-1", "w");
    req.kinds = KindFilter::only(&[EventKind::Remove]);
    let rx = fx.start(req);
    std::fs::write(fx.at("w/a"), "x").unwrap();
    std::fs::remove_file(fx.at("w/a")).unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Remove, "w/a", false));
}

#[test]
fn cancel_and_timeout_free_their_slots_and_the_bound_holds() {
    let fx = Fixture::new("slots");
    let a = fx.start(WatchRequest::new("fw-a", "w"));
    let mut timed = WatchRequest::new("fw-b", "w");
    timed.timeout = Some(Duration::from_millis(200));
    let b = fx.start(timed);
    let err = fx
        .registry
        .start(WatchRequest::new("fw-c", "w"), Box::new(|_| {}))
        .unwrap_err();
    assert_eq!(err.kind, FileErrorKind::Limit);
    assert!(err.message.contains("2 watches are open"), "{err}");
    assert_eq!(ended(&b), WatchEnd::TimedOut);
    assert_eq!(fx.registry.active(), 1);
    assert!(fx.registry.cancel("fw-a"));
    assert_eq!(ended(&a), WatchEnd::Cancelled);
    assert_eq!(fx.registry.active(), 0);
    assert!(!fx.registry.cancel("fw-a"));
    let _c = fx.start(WatchRequest::new("fw-c", "w"));
    assert_eq!(fx.registry.active(), 1);
}

#[test]
fn removing_the_watched_directory_ends_the_watch_and_frees_its_slot() {
    let fx = Fixture::new("root-removed");
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::remove_dir_all(fx.at("w")).unwrap();
    assert_eq!(ended(&rx), WatchEnd::RootRemoved);
    assert_eq!(fx.registry.active(), 0);
}

#[test]
fn a_watch_never_leaves_the_root() {
    let fx = Fixture::new("contained");
    std::os::unix::fs::symlink(fx.base.join("outside"), fx.at("out")).unwrap();
    std::os::unix::fs::symlink(fx.base.join("outside"), fx.at("w/out")).unwrap();
    for path in ["out", "..", "/etc"] {
        let err = fx
            .registry
            .start(WatchRequest::new("fw-x", path), Box::new(|_| {}))
            .unwrap_err();
        assert_eq!(err.kind, FileErrorKind::Permission, "{path}: {err}");
    }
    assert_eq!(fx.registry.active(), 0, "a refused watch holds no slot");
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::write(fx.base.join("outside/x"), "").unwrap();
    std::fs::write(fx.at("w/inside"), "").unwrap();
    assert_eq!(
        next_event(&rx),
        ev(EventKind::Create, "w/inside", false),
        "nothing from outside"
    );
}

#[test]
fn a_tree_made_at_once_is_reported_whole_parents_first() {
    let fx = Fixture::new("burst");
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    std::fs::create_dir_all(fx.at("w/a/b/c")).unwrap();
    std::fs::write(fx.at("w/a/b/c/f.txt"), "x").unwrap();
    let mut creates = Vec::new();
    while !creates.contains(&"w/a/b/c/f.txt".to_owned()) {
        let e = next_event(&rx);
        if e.kind == EventKind::Create {
            assert!(!creates.contains(&e.path), "{} reported twice", e.path);
            creates.push(e.path);
        }
    }
    assert_eq!(creates, ["w/a", "w/a/b", "w/a/b/c", "w/a/b/c/f.txt"]);
}

#[test]
fn a_patch_is_the_modify_create_and_remove_of_its_files_never_its_temporaries() {
    let fx = Fixture::new("agent-patch");
    std::fs::write(fx.at("w/a.txt"), "a\n").unwrap();
    std::fs::write(fx.at("w/gone.txt"), "x\n").unwrap();
    let ws = Workspace::open(fx.at("")).unwrap();
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    let patch = crate::patch::Patch::parse(
        "*** Begin Patch\n*** Update File: w/a.txt\n@@\n-a\n+b\n*** Add File: w/new.txt\n+n\n\
         *** Delete File: w/gone.txt\n*** End Patch",
        None,
    )
    .unwrap();
    ws.patch(&patch).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e = next_event(&rx);
        assert!(!e.path.contains(".mwc-write-"), "{e:?}");
        seen.push((e.kind, e.path));
    }
    assert_eq!(
        seen,
        [
            (EventKind::Modify, "w/a.txt".to_owned()),
            (EventKind::Create, "w/new.txt".to_owned()),
            (EventKind::Remove, "w/gone.txt".to_owned()),
        ]
    );
    assert!(fx.registry.cancel("fw-1"));
    // Nothing else came: neither half of an exchange nor a temporary file.
    match rx.recv_timeout(PATIENCE).expect("the end") {
        WatchMessage::Ended(end) => assert_eq!(end, WatchEnd::Cancelled),
        WatchMessage::Event(e) => panic!("{e:?}"),
    }
}

#[test]
fn the_agents_own_writes_are_a_create_or_a_modify_of_the_file_never_its_temporary() {
    let fx = Fixture::new("agent-write");
    let ws = Workspace::open(fx.at("")).unwrap();
    let rx = fx.start(WatchRequest::new("fw-1", "w"));
    ws.write("w/made.txt", b"one", WriteOptions::default())
        .unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Create, "w/made.txt", false));
    ws.write("w/made.txt", b"two", WriteOptions::default())
        .unwrap();
    assert_eq!(next_event(&rx), ev(EventKind::Modify, "w/made.txt", false));
    // A file of the user's that only looks alike is reported as it is.
    std::fs::write(fx.at("w/.mwc-write-notes.tmp"), "").unwrap();
    assert_eq!(
        next_event(&rx),
        ev(EventKind::Create, "w/.mwc-write-notes.tmp", false)
    );
    assert!(fx.registry.cancel("fw-1"));
    // Nothing else came: no event names a temporary file.
    loop {
        match rx.recv_timeout(PATIENCE).expect("the end") {
            WatchMessage::Ended(end) => break assert_eq!(end, WatchEnd::Cancelled),
            WatchMessage::Event(e) => assert!(
                !e.path.contains(".mwc-write-") || e.path.ends_with("notes.tmp"),
                "{e:?}"
            ),
        }
    }
}
