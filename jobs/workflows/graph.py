"""A workflow drawn as SVG on the server: chains run left to right, a group's members are
stacked (they run side by side in time), each step links to its job in the console."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.utils.html import escape

from ..console.moments import deadline
from .runs import NodeView

BOX_W, BOX_H = 150, 40
GAP_X, GAP_Y, PAD = 36, 12, 12
# A group shows at most this many members; the rest are counted in one box. Members that
# are single steps are laid out in columns of ROWS.
ROWS, COLUMNS = 6, 4
MAX_MEMBERS = ROWS * COLUMNS - 1

COLOURS = {
    "succeeded": ("#e3f4e8", "#2e7d4f"),
    "running": ("#e3eefc", "#2f6fd0"),
    "queued": ("#fff6dc", "#b58400"),
    "scheduled": ("#fff6dc", "#b58400"),
    "waiting": ("#f2f2f2", "#8a8a8a"),
    "pending": ("#f2f2f2", "#8a8a8a"),
    "dead": ("#fde7e7", "#c0392b"),
    "failed": ("#fde7e7", "#c0392b"),
    "expired": ("#fde7e7", "#c0392b"),
    "cancelled": ("#ececec", "#555555"),
}


@dataclass
class _Box:
    view: NodeView | None
    children: list[_Box] = field(default_factory=list)
    hidden: int = 0
    columns: int = 1
    w: float = BOX_W
    h: float = BOX_H


def _tree(nodes: list[NodeView]) -> tuple[_Box | None, list[NodeView]]:
    by_parent: dict[uuid.UUID | None, list[NodeView]] = {}
    compensations = []
    for node in nodes:
        if node.kind == "compensation":
            compensations.append(node)
        elif node.parent is not None or node.kind != "step":
            by_parent.setdefault(node.parent, []).append(node)
    roots = by_parent.get(None, [])

    def build(view: NodeView) -> _Box:
        box = _Box(view)
        kids = sorted(by_parent.get(view.id, []), key=lambda v: v.position)
        if view.kind == "group" and len(kids) > MAX_MEMBERS:
            box.hidden = len(kids) - MAX_MEMBERS
            kids = kids[:MAX_MEMBERS]
        box.children = [build(kid) for kid in kids]
        return box

    return (build(roots[0]) if roots else None), compensations


def _measure(box: _Box) -> None:
    for child in box.children:
        _measure(child)
    kind = box.view.kind if box.view else "step"
    if kind in ("chain", "chord"):
        box.w = sum(c.w for c in box.children) + GAP_X * max(len(box.children) - 1, 0)
        box.h = max((c.h for c in box.children), default=BOX_H)
    elif kind == "group":
        cells = len(box.children) + (1 if box.hidden else 0)
        if cells > ROWS and all(
            c.view is not None and c.view.kind in ("step", "signal") for c in box.children
        ):
            box.columns = -(-cells // ROWS)
            rows = ROWS
            box.w = box.columns * BOX_W + (box.columns - 1) * GAP_Y + 2 * PAD
            box.h = rows * BOX_H + (rows - 1) * GAP_Y
        else:
            box.w = max((c.w for c in box.children), default=BOX_W) + 2 * PAD
            box.h = sum(c.h for c in box.children) + (BOX_H if box.hidden else 0) + GAP_Y * max(cells - 1, 0)
        box.h += 2 * PAD + 14


def render(nodes: list[NodeView], *, job_url: Callable[[uuid.UUID], str]) -> str:
    """The workflow's graph as an <svg> element (already escaped)."""
    root, compensations = _tree(nodes)
    parts: list[str] = []
    width = height = 0.0
    if root is not None:
        _measure(root)
        _draw(root, 10, 10, parts, job_url)
        width, height = root.w + 20, root.h + 20
    if compensations:
        y = height + 24
        parts.append(f'<text x="10" y="{y - 8}" class="wf-caption">Compensations (run newest first if the '
                     f"workflow fails)</text>")  # fmt: skip
        ordered = sorted(compensations, key=lambda n: (n.position == 0, n.position))
        for index, comp in enumerate(ordered):
            x = 10 + index * (BOX_W + GAP_X)
            job = next((n for n in nodes if n.kind == "step" and n.parent == comp.id), None)
            # Its job waits ('waiting') until needed: the node's own state says more.
            state = job.state if job and job.state != "waiting" else comp.state
            badge = f"#{comp.position}" if comp.position else ""
            _step(parts, x, y, comp.label, state, job.job_id if job else None, job_url, badge=badge)
            width = max(width, x + BOX_W + 10)
        height = y + BOX_H + 10
    body = "".join(parts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wf-graph" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="workflow graph">'
        '<defs><marker id="wf-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#777"/></marker></defs>'
        f"{body}</svg>"
    )


def _draw(box: _Box, x: float, y: float, parts: list[str], job_url: Callable[[uuid.UUID], str]) -> None:
    view = box.view
    assert view is not None
    if view.kind in ("chain", "chord"):
        cx = x
        previous: _Box | None = None
        for child in box.children:
            cy = y + (box.h - child.h) / 2
            if previous is not None:
                mid = y + box.h / 2
                parts.append(f'<line x1="{cx - GAP_X:.0f}" y1="{mid:.0f}" x2="{cx - 2:.0f}" y2="{mid:.0f}" '
                             'stroke="#777" stroke-width="1.5" marker-end="url(#wf-arrow)"/>')  # fmt: skip
            _draw(child, cx, cy, parts, job_url)
            cx += child.w + GAP_X
            previous = child
    elif view.kind == "group":
        stroke = COLOURS.get(view.state, COLOURS["pending"])[1]
        parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{box.w:.0f}" height="{box.h:.0f}" rx="8" '
                     f'fill="none" stroke="{stroke}" stroke-dasharray="5 4"/>')  # fmt: skip
        parts.append(f'<text x="{x + PAD:.0f}" y="{y + 14:.0f}" class="wf-caption">'
                     f"{escape(view.label)} · {escape(view.state)}</text>")  # fmt: skip
        top = y + PAD + 14
        if box.columns > 1:
            for index, child in enumerate(box.children):
                column, row = divmod(index, ROWS)
                _draw(child, x + PAD + column * (BOX_W + GAP_Y), top + row * (BOX_H + GAP_Y), parts, job_url)
            column, row = divmod(len(box.children), ROWS)
            cx, cy = x + PAD + column * (BOX_W + GAP_Y), top + row * (BOX_H + GAP_Y)
        else:
            cy = top
            for child in box.children:
                _draw(child, x + PAD + (box.w - 2 * PAD - child.w) / 2, cy, parts, job_url)
                cy += child.h + GAP_Y
            cx = x + PAD
        if box.hidden:
            _step(parts, cx, cy, f"… {box.hidden} more", view.state, None, job_url)
    elif view.kind == "signal":
        waiting = view.state == "running"
        # The box is narrow and dashed already says it waits: "until tomorrow 01:39".
        until = f"until {deadline(view.deadline)}" if view.deadline else "waiting"
        shown = until if waiting else view.state
        _step(parts, x, y, f"wait: {view.label}", view.state, None, job_url, dashed=True, state_text=shown)
    else:
        _step(parts, x, y, view.label.rsplit(".", 1)[-1], view.state, view.job_id, job_url,
              badge=f"×{view.attempt}" if view.attempt > 1 else "")  # fmt: skip


def _step(
    parts: list[str], x: float, y: float, label: str, state: str, job_id: uuid.UUID | None,
    job_url: Callable[[uuid.UUID], str], *, dashed: bool = False, badge: str = "", state_text: str = "",
) -> None:  # fmt: skip
    fill, stroke = COLOURS.get(state, COLOURS["pending"])
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    text = label if len(label) <= 22 else label[:21] + "…"
    shape = (
        f'<rect x="{x:.0f}" y="{y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="1.5"{dash}/>'
        f'<text x="{x + 8:.0f}" y="{y + 17:.0f}" class="wf-label">{escape(text)}</text>'
        f'<text x="{x + 8:.0f}" y="{y + 32:.0f}" class="wf-state" fill="{stroke}">'
        f"{escape(state_text or state)}"
        f"{' ' + escape(badge) if badge else ''}</text>"
        f"<title>{escape(label)}: {escape(state)}</title>"
    )
    if job_id is not None:
        shape = f'<a href="{escape(job_url(job_id))}">{shape}</a>'
    parts.append(shape)
