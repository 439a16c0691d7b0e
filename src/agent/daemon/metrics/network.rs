//! Network bytes received and sent by the workspace's network namespace (`/proc/net/dev`), all
//! interfaces but loopback together. Where the workspace shares the machine's network, the
//! figures are the machine's.

/// The most interfaces read: a namespace may make many, each a line.
const MAX_INTERFACES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct NetworkReading {
    pub(crate) rx_bytes: u64,
    pub(crate) tx_bytes: u64,
}

/// The totals of `/proc/net/dev`'s text. Its two header lines are skipped; a line that does not
/// have an interface's shape (a name, `:`, 16 numbers) adds to `unparsed`.
pub(crate) fn parse_net_dev(text: &str, unparsed: &mut u64) -> NetworkReading {
    let mut total = NetworkReading::default();
    for line in text.lines().skip(2).take(MAX_INTERFACES) {
        let Some((name, counters)) = line.split_once(':') else {
            *unparsed += 1;
            continue;
        };
        let numbers: Option<Vec<u64>> = counters
            .split_ascii_whitespace()
            .map(|n| n.parse().ok())
            .collect();
        let Some(numbers) = numbers.filter(|n| n.len() == 16) else {
            *unparsed += 1;
            continue;
        };
        if name.trim() == "lo" {
            continue;
        }
        total.rx_bytes = total.rx_bytes.saturating_add(numbers[0]);
        total.tx_bytes = total.tx_bytes.saturating_add(numbers[8]);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "Inter-|   Receive                                                |  Transmit\n \
        face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n";

    #[test]
    fn every_interface_but_loopback_is_summed() {
        let text = format!(
            "{HEADER}    lo: 5000 50 0 0 0 0 0 0 5000 50 0 0 0 0 0 0\n  \
             eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n  \
             tap0: 1 1 0 0 0 0 0 0 2 1 0 0 0 0 0 0\n"
        );
        let mut unparsed = 0;
        let got = parse_net_dev(&text, &mut unparsed);
        assert_eq!((got.rx_bytes, got.tx_bytes, unparsed), (1001, 2002, 0));
    }

    #[test]
    fn lines_of_another_shape_are_counted_and_skipped() {
        let text = format!(
            "{HEADER}eth0: 1 2 3\nnonsense\n  eth1: x 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n  \
             eth2: 7 0 0 0 0 0 0 0 9 0 0 0 0 0 0 0\n"
        );
        let mut unparsed = 0;
        let got = parse_net_dev(&text, &mut unparsed);
        assert_eq!((got.rx_bytes, got.tx_bytes, unparsed), (7, 9, 3));
    }
}
