"""The report's sections for photos as sent: the set, how each system answered the sideways photos, the decode floor."""

from __future__ import annotations

from .orientation import AS_DISPLAYED, AS_STORED, REFUSED, UNDECIDED, tally


def photo_lines(result: dict) -> list[str]:
    """Every section that the result has data for (none for the default photos)."""
    return [*_set_lines(result.get("photo_set")), *_orientation_lines(result["systems"]), *_floor_lines(result.get("decode_floor"))]


def _set_lines(photo_set: dict | None) -> list[str]:
    if not photo_set:
        return []
    shares = ", ".join(f"{kind} {100 * share:.0f}%" for kind, share in photo_set["proportions"].items())
    return ["", f"## Photos as sent ({photo_set['name']})", "",
            f"Each photo is sent as often as the others; the requests by size and format: {shares}. The photos "
            "(tools/lab/bench/sent_photos.py says how they are made):", "", *(f"- {photo}" for photo in photo_set["photos"]),
            *_left_out_lines(photo_set.get("left_out"))]


def _left_out_lines(left_out: list[str] | None) -> list[str]:
    """One line naming what the set lacks this run: the HEIC, where its encoder (pillow-heif) could not be installed."""
    if not left_out:
        return []
    return ["", f"Left out of this run: {'; '.join(left_out)}. Its encoder, pillow-heif (installed apart from tsvk when "
                "the set is made), could not be installed or failed; the run's log says why."]


def _orientation_lines(systems: dict) -> list[str]:
    asked = {name: system["orientation"] for name, system in systems.items() if system.get("orientation") is not None}
    if not asked:
        return []
    lines = ["", "## Sideways photos: answered as displayed?", "",
             "Each sideways photo (EXIF orientation 6 or 8; the HEIC's also as the file's rotation) was also sent upright "
             "(its pixels turned, no EXIF) and as stored (its EXIF and rotation left out), in its own format, one request at "
             "a time. 'As displayed': the answer matches the upright photo's, at least "
             "4 times nearer in its top-k probabilities than the stored one's (random weights give most photos the same "
             "top-1, so top-1 alone cannot tell them apart; tools/lab/bench/orientation.py). Systems not listed were not "
             "asked (no request of their own: the compute ceilings, the process-per-job and batch rows).", "",
             "| System | As displayed | As stored | Undecided | Refused | Top-1 as sent = upright's |", "|---|---|---|---|---|---|"]
    for name, rows in asked.items():
        counts = tally(rows)
        same = sum(1 for row in rows if row.get("top1_sent") is not None and row.get("top1_sent") == row.get("top1_upright"))
        answered = sum(1 for row in rows if row.get("top1_sent") is not None)
        lines.append(f"| {systems[name].get('label', name)} | {counts[AS_DISPLAYED]} | {counts[AS_STORED]} | {counts[UNDECIDED]} | "
                     f"{counts[REFUSED]} | {same} of {answered} |")
    refusals = [f"- {name}: {row['photo']}: {row['errors'].get('sent', '')}" for name, rows in asked.items()
                for row in rows if row["verdict"] == REFUSED]
    return lines + (["", "Refused:", *refusals] if refusals else [])


def _floor_lines(floor: list[dict] | None) -> list[str]:
    if not floor:
        return []
    lines = ["", "## The decode floor", "",
             "Each JPEG decoded to the model's input in-process on one thread, the fastest of a few calls: the floor (Pillow's "
             "draft at the smallest DCT scale leaving both sides >= the resize, then a plain resize, crop and normalize), "
             "tsvk's own CPU path (the handler's probe, decode and preprocess) and a full-size decode for scale "
             "(tools/lab/bench/decode_floor.py).", "",
             "| Photo | MP | MB | Floor (ms) | tsvk (ms) | tsvk / floor | Full-size decode (ms) |", "|---|---|---|---|---|---|---|"]
    for row in sorted(floor, key=lambda r: (r["megapixels"], r["photo"])):
        lines.append(f"| {row['kind'] or row['photo']} | {row['megapixels']:g} | {row['bytes'] / 1e6:.1f} | {row['floor_ms']:.1f} | "
                     f"{row['tsvk_ms']:.1f} | {row['tsvk_vs_floor']} | {row['full_decode_ms']:.1f} |")
    return lines
