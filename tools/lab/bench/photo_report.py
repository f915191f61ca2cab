"""The report's sections for photos as sent: the set, how each system answered the sideways photos, the decode floor
and what it and the model allow."""

from __future__ import annotations

from .orientation import AS_DISPLAYED, AS_STORED, REFUSED, UNDECIDED, tally

FLOOR_GOAL = 1.2  # tsvk's decode + preprocess of each JPEG within this of the floor
ALLOWANCE_GOAL = 0.9  # tsvk batch at least this share of what the floor and the model allow
ALLOWANCE_ROWS = ("batch_fast", "ours_kserve_fast", "ours_fast", "ceiling_pipeline_fast")  # the fast archive's rows


def photo_lines(result: dict) -> list[str]:
    """Every section that the result has data for (none for the default photos)."""
    floor = result.get("decode_floor")
    return [*_set_lines(result.get("photo_set")), *_orientation_lines(result["systems"]), *_floor_lines(floor),
            *_allowance_lines(floor, result.get("model_cost"), result)]


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
             "Each photo decoded to the model's input in-process on one thread, the fastest of a few calls: the floor (Pillow's "
             "draft at the smallest DCT scale leaving both sides >= the resize, then a plain resize, crop and normalize; "
             "a format without scaled decode is decoded whole), tsvk's own CPU path (the handler's probe, decode and "
             "preprocess) and, for a JPEG, a full-size decode for scale (tools/lab/bench/decode_floor.py).", "",
             "| Photo | MP | MB | Floor (ms) | tsvk (ms) | tsvk / floor | Full-size decode (ms) |", "|---|---|---|---|---|---|---|"]
    for row in sorted(floor, key=lambda r: (r["megapixels"], r["photo"])):
        full = row.get("full_decode_ms")
        lines.append(f"| {row['kind'] or row['photo']} | {row['megapixels']:g} | {row['bytes'] / 1e6:.1f} | {row['floor_ms']:.1f} | "
                     f"{row['tsvk_ms']:.1f} | {row['tsvk_vs_floor']} | {'-' if full is None else f'{full:.1f}'} |")
    jpegs = [row for row in floor if _is_jpeg_row(row)]
    if jpegs:
        worst = max(jpegs, key=lambda row: row["tsvk_vs_floor"] or 0)
        met = all((row["tsvk_vs_floor"] or 0) <= FLOOR_GOAL for row in jpegs)
        lines += ["", f"tsvk within {FLOOR_GOAL:g}x the floor on every JPEG: **{'yes' if met else 'no'}** (at most "
                      f"{worst['tsvk_vs_floor']}x, {worst['kind'] or worst['photo']}). The other formats have no scaled decode: "
                      "their floor is tsvk's own decoder, decoded whole, listed for what they cost."]
    return lines


def _is_jpeg_row(row: dict) -> bool:
    """A JPEG's row: its format, or for rows measured before other formats were, its full-size decode."""
    return row.get("format", "JPEG") in ("JPEG", "MPO") and row.get("full_decode_ms") is not None


def allowance(floor: list[dict], model_ms: float, vcpus: int) -> dict:
    """Images/s `vcpus` allow at most over photos each sent as often as the others: every vCPU busy decoding at the
    floor and running the model, nothing else."""
    floor_ms = sum(row["floor_ms"] for row in floor) / len(floor)
    return {"floor_ms": round(floor_ms, 1), "model_ms": round(model_ms, 2), "vcpus": vcpus,
            "images_per_s": round(vcpus * 1e3 / (floor_ms + model_ms), 2)}


def _allowance_lines(floor: list[dict] | None, model: dict | None, result: dict) -> list[str]:
    """What the machine's vCPUs allow at most over the set, and each fast-archive row's share of it."""
    if not floor or not model:
        return []
    vcpus = result["machine"].get("vcpus") or 1
    allowed = allowance(floor, model["ms_per_image"], vcpus)
    lines = ["", "## What the decode floor and the model allow", "",
             f"Each photo sent as often as the others, the floor averages {allowed['floor_ms']} ms per photo over the "
             f"{len(floor)} photos above; the fast archive's model ({model['format']}) costs {allowed['model_ms']} ms per "
             f"image on one thread at its cheapest batch size ({model['batch']}). {vcpus} vCPUs each decoding at the floor "
             f"and running the model, nothing else, allow **{allowed['images_per_s']:.2f} img/s**: no server, batch run or "
             "ceiling of this archive can go past it on this machine.", "",
             "| System | img/s (median) | share of what the floor and the model allow |", "|---|---|---|"]
    for name in ALLOWANCE_ROWS:
        rate = (result["systems"].get(name) or {}).get("throughput_ips")
        if rate:
            lines.append(f"| {result['systems'][name].get('label', name)} | {rate:.2f} | {rate / allowed['images_per_s']:.2f} |")
    batch = (result["systems"].get("batch_fast") or {}).get("throughput_ips")
    if batch:
        share = batch / allowed["images_per_s"]
        lines += ["", f"tsvk batch >= {ALLOWANCE_GOAL:g}x what the floor and the model allow: "
                      f"**{'yes' if share >= ALLOWANCE_GOAL else 'no'}** ({share:.2f}x)."]
    return lines
