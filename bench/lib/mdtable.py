"""A Markdown table, its columns padded to line up: the bench scripts'
summaries (python3 with PYTHONPATH=bench/lib)."""


def print_table(hdr, rows):
    """Prints hdr and rows (lists of cells) as a Markdown table."""
    w = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    fmt = "| " + " | ".join("{:<%d}" % n for n in w) + " |"
    print(fmt.format(*hdr))
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for line in rows:
        print(fmt.format(*line))
