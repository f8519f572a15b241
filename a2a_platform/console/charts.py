"""The dashboard's and agent pages' charts: tasks per hour by final state, and turn durations.

Two bounded queries over the last 24 hours (a GROUP BY hour on the task state
index, and the newest turns on the finished-turn index), turned into plain
numbers and SVG coordinates here; the template draws them (console/_charts.html),
so nothing in this module builds markup. Hours are UTC, truncated by the
database (TruncHour works on SQLite and PostgreSQL alike).
"""

import math
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count
from django.db.models.functions import TruncHour
from django.utils import timezone

from tasks_app.models import Message, Task, TaskState

HOURS = 24
# Final states, bottom of the stack first, each with its colour.
FINAL_STATES = [
    (TaskState.COMPLETED, "#12b76a"),
    (TaskState.FAILED, "#f04438"),
    (TaskState.REJECTED, "#f79009"),
    (TaskState.CANCELED, "#98a2b3"),
]
PERCENTILES = [(50, "#2457c5"), (90, "#7a5af8"), (99, "#c11574")]
# The newest turns the duration chart reads: a day of a busy tenant still costs one bounded query.
MAX_TURNS = 10_000

# The drawing area inside the SVG viewBox (0 0 WIDTH HEIGHT).
WIDTH, HEIGHT = 480, 200
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 10, 24


@dataclass
class Segment:
    state: str
    label: str
    colour: str
    count: int
    y: float
    height: float


@dataclass
class Bar:
    hour: object
    x: float
    width: float
    total: int
    segments: list[Segment] = field(default_factory=list)


@dataclass
class Line:
    percentile: int
    colour: str
    points: str  # "x,y x,y ..." for <polyline>, hours without turns left out
    dots: list[tuple[str, str, str]]  # (x, y, label) of each hour's value, drawn as a dot
    day_value: float | None  # the percentile over the whole day, seconds


@dataclass
class Tick:
    value: str
    y: float


@dataclass
class Chart:
    bars: list[Bar]
    bar_ticks: list[Tick]
    hour_labels: list[tuple[float, str]]
    legend: list[tuple[str, str]]
    tasks_total: int
    lines: list[Line]
    line_ticks: list[Tick]
    turns_counted: int
    turns_capped: bool
    rows: list[dict]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right_edge: int = WIDTH - RIGHT
    top: int = TOP
    baseline: int = HEIGHT - BOTTOM


def _nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value` (an axis' top)."""
    if value <= 0:
        return 1
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def percentile(values: list[float], p: int) -> float:
    """The p-th percentile of sorted `values`, by linear interpolation between closest ranks."""
    rank = (len(values) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return values[low] + (values[high] - values[low]) * (rank - low)


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def activity_chart(tenant, agent=None, now=None) -> Chart:
    """The last 24 hours of `tenant` (or of one of its agents) as chart values."""
    now = now or timezone.now()
    first_hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS - 1)
    hours = [first_hour + timedelta(hours=n) for n in range(HOURS)]

    tasks = Task.objects.filter(
        tenant=tenant, state__in=[state for state, _ in FINAL_STATES], status_timestamp__gte=first_hour
    )
    turns = Message.objects.filter(tenant=tenant, turn_finished_at__isnull=False)
    turns = turns.filter(turn_finished_at__gte=first_hour, turn_started_at__isnull=False)
    if agent is not None:
        tasks = tasks.filter(agent=agent)
        turns = turns.filter(task__agent=agent)
    counts = {
        (row["hour"], row["state"]): row["n"]
        for row in tasks.annotate(hour=TruncHour("status_timestamp"))
        .values("hour", "state")
        .annotate(n=Count("pk"))
        .order_by()
    }
    newest = turns.order_by("-turn_finished_at").values_list("turn_finished_at", "turn_started_at")
    samples = [
        (finished, max(0.0, (finished - started).total_seconds()))
        for finished, started in newest[: MAX_TURNS + 1]
    ]
    capped = len(samples) > MAX_TURNS
    samples = samples[:MAX_TURNS]
    return _chart(hours, counts, samples, capped)


def _chart(hours, counts, samples, capped) -> Chart:
    plot_width = WIDTH - LEFT - RIGHT
    plot_height = HEIGHT - TOP - BOTTOM
    slot = plot_width / len(hours)
    baseline = HEIGHT - BOTTOM
    labels = dict(TaskState.choices)

    totals = [sum(counts.get((hour, state), 0) for state, _ in FINAL_STATES) for hour in hours]
    top = _nice_ceiling(max(totals, default=0))
    bars, rows = [], []
    for index, hour in enumerate(hours):
        bar = Bar(
            hour=hour, x=round(LEFT + index * slot + slot * 0.12, 2), width=round(slot * 0.76, 2), total=0
        )
        y = float(baseline)
        for state, colour in FINAL_STATES:
            count = counts.get((hour, state), 0)
            if count:
                height = round(count / top * plot_height, 2)
                y = round(y - height, 2)
                bar.segments.append(Segment(state, labels[state], colour, count, y, height))
            bar.total += count
        bars.append(bar)

    # Durations by hour of the turn's end: the percentile lines, and one row per hour for the table.
    by_hour: dict[int, list[float]] = {}
    for finished, seconds in samples:
        index = int((finished - hours[0]).total_seconds() // 3600)
        if 0 <= index < len(hours):
            by_hour.setdefault(index, []).append(seconds)
    for values in by_hour.values():
        values.sort()
    everything = sorted(seconds for _, seconds in samples)
    hourly = {index: {p: percentile(values, p) for p, _ in PERCENTILES} for index, values in by_hour.items()}
    line_top = _nice_ceiling(max((v for per in hourly.values() for v in per.values()), default=0))
    lines = []
    for p, colour in PERCENTILES:
        dots = [
            (
                f"{LEFT + (index + 0.5) * slot:.1f}",
                f"{baseline - hourly[index][p] / line_top * plot_height:.1f}",
                f"{hours[index]:%H}:00 UTC: p{p} {_seconds(hourly[index][p])}",
            )
            for index in sorted(hourly)
        ]
        points = " ".join(f"{x},{y}" for x, y, _ in dots)
        lines.append(Line(p, colour, points, dots, percentile(everything, p) if everything else None))

    for index, hour in enumerate(hours):
        row = {"hour": hour, "turns": len(by_hour.get(index, []))}
        row["counts"] = [counts.get((hour, state), 0) for state, _ in FINAL_STATES]
        row["percentiles"] = [_seconds(hourly[index][p]) if index in hourly else "—" for p, _ in PERCENTILES]
        rows.append(row)

    return Chart(
        bars=bars,
        bar_ticks=[Tick(f"{top * f:g}", baseline - plot_height * f) for f in (0, 0.5, 1)],
        hour_labels=[(LEFT + (i + 0.5) * slot, f"{hours[i]:%H}:00") for i in range(0, len(hours), 6)],
        legend=[(labels[state], colour) for state, colour in FINAL_STATES],
        tasks_total=sum(totals),
        lines=lines,
        line_ticks=[Tick(_seconds(line_top * f), baseline - plot_height * f) for f in (0, 0.5, 1)],
        turns_counted=len(samples),
        turns_capped=capped,
        rows=rows,
    )
