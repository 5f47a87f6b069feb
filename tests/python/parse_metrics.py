"""Parse a Prometheus text exposition (stdin) with prometheus_client's own parser.

Prints one line per metric family, `name type samples`, so the Rust test can check that
the families it expects parsed with the right type. Exits non-zero (with the parser's
error) when the text is not valid exposition format.
"""

import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
for family in text_string_to_metric_families(text):
    print(f"{family.name} {family.type} {len(family.samples)}")
