//! Slurm's compressed host lists (`node[1-3,7],gpu[01-02]`, as squeue prints them) expanded to
//! names in order, as `scontrol show hostnames` does. Pure.

/// The names of a host list, in its order. One bracket group per name (Slurm's usual form); an
/// empty list has no names. `None` when the text is not a host list.
pub fn expand(list: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for entry in top_level_entries(list.trim())? {
        match entry.split_once('[') {
            None => names.push(entry.to_string()),
            Some((prefix, rest)) => {
                let (ranges, suffix) = rest.split_once(']')?;
                if suffix.contains(['[', ']']) {
                    return None;
                }
                for range in ranges.split(',') {
                    for n in range_numbers(range)? {
                        names.push(format!("{prefix}{n}{suffix}"));
                    }
                }
            }
        }
    }
    Some(names)
}

/// The list's entries, split at commas outside brackets.
fn top_level_entries(list: &str) -> Option<Vec<&str>> {
    let (mut entries, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                entries.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
    }
    if depth != 0 {
        return None;
    }
    entries.push(&list[start..]);
    let entries: Vec<&str> = entries.into_iter().map(str::trim).filter(|e| !e.is_empty()).collect();
    Some(entries)
}

/// `7` or `01-03`, with the first number's zero padding kept.
fn range_numbers(range: &str) -> Option<Vec<String>> {
    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(lo) || !digits(hi) {
        return None;
    }
    let (a, b): (u64, u64) = (lo.parse().ok()?, hi.parse().ok()?);
    // A bound on what one range may name: a host list of a real allocation is far smaller.
    if b < a || b - a > 100_000 {
        return None;
    }
    let width = lo.len();
    Some((a..=b).map(|n| format!("{n:0width$}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn host_lists_expand_as_scontrol_show_hostnames_does() {
        let cases: &[(&str, Option<&[&str]>)] = &[
            ("node1", Some(&["node1"])),
            ("node[1-3]", Some(&["node1", "node2", "node3"])),
            ("node[1-2,7],gpu[01-02]", Some(&["node1", "node2", "node7", "gpu01", "gpu02"])),
            ("a,b", Some(&["a", "b"])),
            ("n[08-10]x", Some(&["n08x", "n09x", "n10x"])),
            ("", Some(&[])),
            ("node[3-1]", None),
            ("node[1-", None),
            ("node]1[", None),
            ("node[a-b]", None),
            ("r[1-2]n[1-2]", None),
            ("node[[1]]", None),
        ];
        for (list, want) in cases {
            let got = expand(list);
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{list:?}");
        }
    }

    proptest! {
        /// Compressing consecutive numbers and expanding gives the names back, in order.
        #[test]
        fn expanding_a_compressed_range_gives_every_name(prefix in "[a-z]{1,6}", start in 0u32..500, len in 1u32..40) {
            let list = format!("{prefix}[{start}-{}]", start + len - 1);
            let want: Vec<String> = (start..start + len).map(|n| format!("{prefix}{n}")).collect();
            prop_assert_eq!(expand(&list), Some(want));
        }
    }
}
