"""Print the workload=broadcast rows of a results CSV as markdown tables: one-way latency p50 / p99 (us)
per payload x (control, tp), plus the spread over repeats when there are several (rank 0's send cost too).

    python3 scripts/broadcast_table.py results/h200/broadcast_tp2-4-8.csv [more.csv ...]
"""

import sys

import pandas as pd

if len(sys.argv) < 2:
    print("usage: python3 scripts/broadcast_table.py RESULTS.csv [more.csv ...]", file=sys.stderr)
    sys.exit(2)
df = pd.concat(pd.read_csv(f) for f in sys.argv[1:])
df = df[(df.workload == "broadcast") & (df.status == "ok")]
for col in ("ctrl_oneway_us_p50", "ctrl_oneway_us_p99", "ctrl_send_us_p50"):
    table = df.pivot_table(index="payload", columns=["tp", "control"], values=col, aggfunc="median")
    order = sorted(table.index, key=lambda p: (p.split("-")[0], df[df.payload == p].payload_bytes.iloc[0]))
    print(f"\n### {col} (median over {df.repeat.nunique()} repeat(s))\n")
    print(table.loc[order].round(1).to_markdown())
    if df.repeat.nunique() > 1:
        spread = df.pivot_table(index="payload", columns=["tp", "control"], values=col,
                                aggfunc=lambda v: v.max() / v.min())
        print(f"\nmax/min over repeats:\n\n{spread.loc[order].round(2).to_markdown()}")
