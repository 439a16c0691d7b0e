//! The `mwc-agent` command line, parsed by hand: `daemon` and `connect`, their options, and
//! `--help`. Builds its own tokio runtime; returns the process exit code.

use std::path::PathBuf;

use super::daemon::{self, DaemonConfig};

const USAGE: &str = "\
usage: mwc-agent daemon --root DIR --state-dir DIR --socket PATH
                        [--max-log-bytes N] [--max-total-log-bytes N] [--max-watches N]
                        [--max-ended-execs N] [--redact-env NAME,...] [--config -]
                        [--agent-dir DIR] [--askpass PATH] [--python PATH]
                        [--metrics-interval SECONDS|off] [--metrics-ring-bytes N]
       mwc-agent connect --socket PATH
       mwc-agent askpass PROMPT
       mwc-agent stage --root DIR --path PATH --to FILE --max-bytes N
       mwc-agent --help

daemon   supervise the workspace's processes, files and watches, keep durable exec logs in
         --state-dir, and serve the channel protocol on the unix socket --socket (mode 0600).
         Byte counts take an optional K, M or G suffix (powers of 1024). Logs go to stderr;
         MWC_AGENT_LOG sets the level (error, warn, info, debug; default info).
         --max-ended-execs (default 1000) bounds the ended execs kept, records and logs: past
         it the ones that ended first are deleted (at start and as execs end) and answer
         not_found. Running execs are never deleted.
         --redact-env names variables of the daemon's environment that hold secrets: their
         values are redacted from every exec's events and records, like an exec's own secrets.
         --config - reads the launcher's JSON from stdin: the execs' environment (instead of
         the daemon's own), the user commands run as, and their resource limits.
         --agent-dir (default STATE-DIR/agent), outside --root, is the HOME and working
         directory of the agent-identity steps of exec.start, which get a fixed environment
         and none of the workspace's; git mirrors are kept there. --askpass names the
         GIT_ASKPASS program of those steps (read-only to the workspace); ping reports both.
         A step given a credential gets its token from the daemon through that program, over
         the socket PATH.askpass, and only while it runs; --python is the interpreter the
         program runs this agent with.
         --metrics-interval (default 2, from 0.5 to 60; off: not until metrics.set asks)
         is how often the workspace's metrics stream (mt-…) is sampled: CPU, memory, disk,
         processes, network, and the GPUs where nvidia-smi is on the daemon's PATH;
         --metrics-ring-bytes (default 1M) bounds the samples it keeps.
connect  copy stdin to the daemon's socket and the socket to stdout until either side closes;
         exits 0 when the daemon closes the connection.
askpass  git's GIT_ASKPASS inside an authenticated step: ask the daemon (MWC_ASKPASS_SOCKET)
         for the answer to PROMPT and print it; exit 1 when there is none.
stage    copy the regular file PATH, resolved beneath DIR as file operations are (no way out
         of DIR, no FIFO, no hard-linked file), into the new file FILE (mode 0600), at most N
         bytes: how an agent step takes a file a workspace command wrote (a push's bundle)
         without its git ever reading a path the workspace controls.
";

/// Runs the command line (without the program name); returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            print!("{USAGE}");
            if args.is_empty() {
                2
            } else {
                0
            }
        }
        Some("daemon") => match parse_daemon(&args[1..]) {
            Ok(Some(config)) => run_daemon(config),
            Ok(None) => {
                print!("{USAGE}");
                0
            }
            Err(e) => usage_error(&e),
        },
        Some("connect") => match parse_connect(&args[1..]) {
            Ok(Some(socket)) => run_connect(socket),
            Ok(None) => {
                print!("{USAGE}");
                0
            }
            Err(e) => usage_error(&e),
        },
        Some("askpass") => match &args[1..] {
            [prompt] => run_askpass(prompt),
            _ => usage_error("askpass takes one argument, git's prompt"),
        },
        Some("stage") => match parse_stage(&args[1..]) {
            Ok(Some(stage)) => run_stage(&stage),
            Ok(None) => {
                print!("{USAGE}");
                0
            }
            Err(e) => usage_error(&e),
        },
        Some(other) => usage_error(&format!("unknown command '{other}'")),
    }
}

fn usage_error(message: &str) -> i32 {
    eprintln!("mwc-agent: {message}\n\n{USAGE}");
    2
}

/// Options as `--name value` pairs; `None` when `--help` was asked for.
fn options(args: &[String], known: &[&str]) -> Result<Option<Vec<(String, String)>>, String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        if !known.contains(&name) {
            return Err(format!("unknown option '{name}'"));
        }
        let value = match inline {
            Some(value) => value,
            None => iter
                .next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))?,
        };
        out.push((name.to_owned(), value));
    }
    Ok(Some(out))
}

/// A byte count: digits with an optional K, M or G suffix (powers of 1024).
fn bytes(name: &str, text: &str) -> Result<u64, String> {
    let (digits, scale) = match text.chars().last() {
        Some('K' | 'k') => (&text[..text.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&text[..text.len() - 1], 1 << 20),
        Some('G' | 'g') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{name} must be a positive number of bytes (e.g. 67108864 or 64M)"))
}

fn parse_daemon(args: &[String]) -> Result<Option<DaemonConfig>, String> {
    let known = [
        "--root",
        "--state-dir",
        "--socket",
        "--max-log-bytes",
        "--max-total-log-bytes",
        "--max-watches",
        "--max-ended-execs",
        "--redact-env",
        "--config",
        "--agent-dir",
        "--askpass",
        "--python",
        "--metrics-interval",
        "--metrics-ring-bytes",
    ];
    let Some(opts) = options(args, &known)? else {
        return Ok(None);
    };
    let get = |name: &str| opts.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v);
    let required = |name: &str| get(name).ok_or_else(|| format!("{name} is required"));
    let mut config = DaemonConfig::new(
        PathBuf::from(required("--root")?),
        PathBuf::from(required("--state-dir")?),
        PathBuf::from(required("--socket")?),
    );
    if let Some(v) = get("--max-log-bytes") {
        config.max_log_bytes = bytes("--max-log-bytes", v)?;
    }
    if let Some(v) = get("--max-total-log-bytes") {
        config.max_total_log_bytes = bytes("--max-total-log-bytes", v)?;
    }
    if let Some(v) = get("--max-watches") {
        config.max_watches = v
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .ok_or("--max-watches must be a positive integer")?;
    }
    if let Some(v) = get("--max-ended-execs") {
        config.max_ended_execs = v
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
            .ok_or("--max-ended-execs must be a positive integer")?;
    }
    if let Some(v) = get("--config") {
        if v != "-" {
            return Err("--config takes '-' (read the launch configuration from stdin)".into());
        }
        config.config_stdin = true;
    }
    if let Some(v) = get("--metrics-interval") {
        config.metrics.interval = match v.as_str() {
            "off" => None,
            seconds => {
                let seconds: f64 = seconds
                    .parse()
                    .map_err(|_| "--metrics-interval is a number of seconds or 'off'")?;
                let interval = crate::agent::ops::metrics_interval("--metrics-interval", seconds)
                    .map_err(|e| e.message)?;
                Some(interval)
            }
        };
    }
    if let Some(v) = get("--metrics-ring-bytes") {
        let n = bytes("--metrics-ring-bytes", v)?;
        config.metrics.ring_bytes =
            usize::try_from(n).map_err(|_| "--metrics-ring-bytes is too large")?;
    }
    if let Some(v) = get("--askpass") {
        config.askpass = Some(PathBuf::from(v));
    }
    if let Some(v) = get("--python") {
        config.python = Some(PathBuf::from(v));
    }
    if let Some(v) = get("--agent-dir") {
        config.agent_dir = Some(PathBuf::from(v));
    }
    if let Some(v) = get("--redact-env") {
        config.redact_env = v
            .split(',')
            .filter(|name| !name.is_empty())
            .map(|name| {
                crate::policy::env_name(name).map_err(|e| format!("--redact-env: {}", e.message))
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(Some(config))
}

fn parse_connect(args: &[String]) -> Result<Option<PathBuf>, String> {
    let Some(opts) = options(args, &["--socket"])? else {
        return Ok(None);
    };
    opts.into_iter()
        .next_back()
        .map(|(_, v)| PathBuf::from(v))
        .map(Some)
        .ok_or_else(|| "--socket is required".to_string())
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MWC_AGENT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(false)
        .try_init();
}

/// Threads for the daemon's blocking work: launching processes, file operations, log reads,
/// recording ends, pruning.
const MAX_BLOCKING_THREADS: usize = 16;

fn run_daemon(config: DaemonConfig) -> i32 {
    init_logging();
    // One runtime thread: an output chunk is read, logged and pushed to the gateway without a
    // hand-off between workers, whose futex wake-ups (and the sibling worker left runnable)
    // also sent the gateway's wake-up to the other CPU. Blocking work (launches, file operations,
    // log reads, pruning) has the blocking pool. Measured against two workers in alternating runs:
    // the same throughput or better, a shorter path to a waiting client (bench/README.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // tokio's default of 512 let 1000 execs ending together (each records its end on the
        // pool) start ~500 threads, whose allocator arenas the daemon then kept: 8 MiB more
        // for nothing. Every job there is bounded, so past this many they queue.
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mwc-agent daemon: cannot start the runtime: {e}");
            return 1;
        }
    };
    match runtime.block_on(daemon::run(config)) {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("mwc-agent daemon: {e}");
            1
        }
    }
}

/// Prints the daemon's answer to git's prompt; 1 (git then gives up) when there is none.
struct Stage {
    root: PathBuf,
    path: String,
    to: PathBuf,
    max_bytes: u64,
}

fn parse_stage(args: &[String]) -> Result<Option<Stage>, String> {
    let Some(opts) = options(args, &["--root", "--path", "--to", "--max-bytes"])? else {
        return Ok(None);
    };
    let get = |name: &str| {
        opts.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("{name} is required"))
    };
    Ok(Some(Stage {
        root: PathBuf::from(get("--root")?),
        path: get("--path")?,
        to: PathBuf::from(get("--to")?),
        max_bytes: bytes("--max-bytes", &get("--max-bytes")?)?,
    }))
}

fn run_stage(stage: &Stage) -> i32 {
    match super::stage::stage(&stage.root, &stage.path, &stage.to, stage.max_bytes) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("mwc-agent stage: {e}");
            1
        }
    }
}

fn run_askpass(prompt: &str) -> i32 {
    let Some(socket) = std::env::var_os(daemon::ASKPASS_SOCKET_ENV) else {
        eprintln!(
            "mwc-agent askpass: {} is not set",
            daemon::ASKPASS_SOCKET_ENV
        );
        return 1;
    };
    match daemon::ask(std::path::Path::new(&socket), prompt) {
        Ok(Some(answer)) => {
            println!("{answer}");
            0
        }
        Ok(None) => 1,
        Err(e) => {
            eprintln!("mwc-agent askpass: cannot ask the agent: {e}");
            1
        }
    }
}

fn run_connect(socket: PathBuf) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("mwc-agent connect: cannot start the runtime: {e}");
            return 1;
        }
    };
    let code = runtime.block_on(async {
        let stop = async {
            use tokio::signal::unix::{signal, SignalKind};
            match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(mut term), Ok(mut int)) => tokio::select! {
                    _ = term.recv() => 143,
                    _ = int.recv() => 130,
                },
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            result = super::connect::connect(&socket) => match result {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("mwc-agent connect: {e}");
                    1
                }
            },
            code = stop => code,
        }
    });
    // Stdin is read on a blocking thread that cannot be interrupted: do not wait for it.
    runtime.shutdown_background();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn daemon_options_parse_with_suffixes() {
        let config = parse_daemon(&strings(&[
            "--root",
            "/w",
            "--state-dir=/s",
            "--socket",
            "/s/sock",
            "--max-log-bytes",
            "64M",
            "--max-total-log-bytes",
            "1G",
            "--max-watches",
            "3",
            "--max-ended-execs",
            "50",
            "--redact-env",
            "GH_TOKEN,DB_PASSWORD",
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(config.root, PathBuf::from("/w"));
        assert_eq!(config.state_dir, PathBuf::from("/s"));
        assert_eq!(config.max_log_bytes, 64 << 20);
        assert_eq!(config.max_total_log_bytes, 1 << 30);
        assert_eq!(config.max_watches, 3);
        assert_eq!(config.max_ended_execs, 50);
        assert_eq!(config.redact_env, ["GH_TOKEN", "DB_PASSWORD"]);
        assert_eq!(
            config.metrics.interval,
            Some(crate::agent::ops::DEFAULT_METRICS_INTERVAL)
        );
    }

    #[test]
    fn the_metrics_options_take_an_interval_within_bounds_or_off() {
        let base = ["--root", "/w", "--state-dir", "/s", "--socket", "/k"];
        let parse = |extra: &[&str]| parse_daemon(&strings(&[&base[..], extra].concat()));
        let config = parse(&["--metrics-interval", "0.5", "--metrics-ring-bytes", "16K"])
            .unwrap()
            .unwrap();
        assert_eq!(
            config.metrics.interval,
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(config.metrics.ring_bytes, 16 << 10);
        let off = parse(&["--metrics-interval", "off"]).unwrap().unwrap();
        assert_eq!(off.metrics.interval, None);
        for bad in ["0.1", "61", "soon", "NaN"] {
            let err = parse(&["--metrics-interval", bad]).unwrap_err();
            assert!(err.contains("--metrics-interval"), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_command_lines_are_refused_with_the_reason() {
        let err = parse_daemon(&strings(&["--root", "/w"])).unwrap_err();
        assert!(err.contains("--state-dir is required"), "{err}");
        let err = parse_daemon(&strings(&["--bogus", "1"])).unwrap_err();
        assert!(err.contains("unknown option '--bogus'"), "{err}");
        let base = ["--root", "/w", "--state-dir", "/s", "--socket", "/k"];
        let err =
            parse_daemon(&strings(&[&base[..], &["--redact-env", "A,1B"]].concat())).unwrap_err();
        assert!(err.starts_with("--redact-env:"), "{err}");
        let err = bytes("--max-log-bytes", "12X").unwrap_err();
        assert!(err.contains("positive number of bytes"));
        assert!(parse_connect(&strings(&[])).is_err());
        assert_eq!(main(strings(&["frobnicate"])), 2);
        assert_eq!(main(strings(&["--help"])), 0);
    }

    #[test]
    fn connect_without_a_daemon_fails_clearly() {
        let socket = std::env::temp_dir().join(format!("no-daemon-{}.sock", std::process::id()));
        assert_eq!(
            main(strings(&["connect", "--socket", socket.to_str().unwrap()])),
            1
        );
    }
}
