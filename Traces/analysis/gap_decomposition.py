"""Where the freshness gap is: scored opens by the gap to the same app's previous open, and the
share of each class a schedule keeps fresh (content age <= 60 min, scored strictly: the worse of
the wakes as written and one second earlier, as FreshnessScore.strict does).

    swift run -c release bgctl simulate trace Traces/studentlife-dev.csv --utc-offset=-4 \
        --policy learned --wakes-per-open 1 --wakes-out /tmp/wakes.csv
    python3 Traces/analysis/gap_decomposition.py Traces/studentlife-dev.csv /tmp/wakes.csv

Same warm-up and scoring rules as the trace README (first 7 days of each user and each pair's
first open are not scored).
"""
import bisect, collections, csv, sys

WARMUP = 7 * 86400
CLASSES = [("free (<= 1 h)", -1, 3600), ("1-2 h", 3600, 7200), ("2-8 h", 7200, 8 * 3600), ("> 8 h", 8 * 3600, 1e18)]


def load(path, column):
    data = collections.defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            data[(row["user"], row["app"])].append(float(row[column]))
    for key in data:
        data[key].sort()
    return data


def classify(trace, wakes, shift):
    span = collections.defaultdict(lambda: [float("inf"), 0.0])
    for (user, _), opens in trace.items():
        span[user][0] = min(span[user][0], opens[0])
        span[user][1] = max(span[user][1], opens[-1])
    fresh = collections.Counter()
    total = collections.Counter()
    for (user, app), opens in trace.items():
        start = span[user][0] + WARMUP
        woken = [w + shift for w in wakes.get((user, app), [])]
        for i, t in enumerate(opens):
            if i == 0 or t < start:
                continue
            gap = t - opens[i - 1]
            name = next(c for c, lo, hi in CLASSES if lo < gap <= hi)
            j = bisect.bisect_right(woken, t) - 1
            last = max(opens[i - 1], woken[j] if j >= 0 else opens[i - 1])
            total[name] += 1
            fresh[name] += (t - last) <= 3600
    return fresh, total


def main():
    trace = load(sys.argv[1], "open_utc")
    wakes = load(sys.argv[2], "wake_utc")
    runs = [classify(trace, wakes, shift) for shift in (0, -1)]
    fresh, total = min(runs, key=lambda r: sum(r[0].values()))
    n = sum(total.values())
    print(f"{'class':<14}{'share of opens':>16}{'kept fresh':>12}")
    for name, _, _ in CLASSES:
        print(f"{name:<14}{total[name] / n:>16.2f}{fresh[name] / max(1, total[name]):>12.2f}")
    print(f"{'all':<14}{1:>16.2f}{sum(fresh.values()) / n:>12.3f}")


if __name__ == "__main__":
    main()
