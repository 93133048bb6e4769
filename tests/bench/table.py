"""The one table every benchmark prints into."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    name: str
    value: str
    target: str = ""
    ok: bool | None = None


@dataclass
class Table:
    rows: list[Row] = field(default_factory=list)

    def add(self, name: str, value: str, target: str = "", ok: bool | None = None) -> None:
        self.rows.append(Row(name, value, target, ok))
        mark = "" if ok is None else ("  ok" if ok else "  MISSED")
        print(f"  {name}: {value}{'  (target ' + target + ')' if target else ''}{mark}", flush=True)

    def render(self) -> str:
        headers = ("benchmark", "measured", "target", "")
        cells = [
            (r.name, r.value, r.target, "" if r.ok is None else ("ok" if r.ok else "MISSED"))
            for r in self.rows
        ]
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        body = [
            "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
            for row in cells
        ]
        return "\n".join([line, rule, *body])

    @property
    def missed(self) -> list[Row]:
        return [r for r in self.rows if r.ok is False]
