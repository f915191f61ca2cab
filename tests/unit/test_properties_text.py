"""Config text as TorchServe's Java reader sees it: what `tsvk config` writes arrives unchanged, and
tsvk's own reader (handlers/tsvk/common/properties.py) agrees with java.util.Properties on every line."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tsvk.common.properties import escape_value
from tsvk.common.properties import read_properties
from tsvk_tools.doctor.properties import read as read_doctor_properties
from tsvk_tools.config.serving_config import ServingRequest, write_config

READER = Path(__file__).resolve().parents[1] / "fixtures" / "ReadProperties.java"
AWKWARD_VALUES = ["file:///srv/model\\-store/.*", "C:\\tmp\\models", " leading blank", "tab\there", "é and 😀",
                  "ends with \\", "a=b:c #!", "line\nbreak", ""]


def java_reads(path: Path) -> dict[str, str]:
    """What java.util.Properties.load reads from `path` (tests/fixtures/ReadProperties.java)."""
    if shutil.which("java") is None:
        pytest.fail("java is needed (TorchServe needs it too): apt-get install -y openjdk-17-jre-headless")
    out = subprocess.run(["java", str(READER), str(path)], capture_output=True, text=True, check=True, timeout=120).stdout
    return {key: re.sub(r"\\u([0-9a-f]{4})", lambda m: chr(int(m.group(1), 16)), value).encode("utf-16", "surrogatepass").decode("utf-16")
            for key, value in (line.split("\t", 1) for line in out.splitlines())}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    folder = tmp_path_factory.mktemp("props")
    config = folder / "config.properties"
    write_config(ServingRequest(models=("resnet18",), archive_check=False, model_store=Path("/srv/t\\tore.v2\\models")), config)
    with config.open("a") as text:
        text.writelines(f"awkward.{i}={escape_value(v)}\n" for i, v in enumerate(AWKWARD_VALUES))
        text.write("continued = first \\\n    second\nescaped\\=key : x\n")
    return config, java_reads(config)


def test_every_awkward_value_reaches_java_as_written(written):
    _, java = written
    assert [java[f"awkward.{i}"] for i in range(len(AWKWARD_VALUES))] == AWKWARD_VALUES


def test_the_model_store_and_its_allowed_urls_pattern_reach_java_unchanged(written):
    _, java = written
    assert java["model_store"] == "/srv/t\\tore.v2\\models"
    assert re.fullmatch(java["allowed_urls"], "file:///srv/t\\tore.v2\\models/resnet18.mar")
    assert not re.fullmatch(java["allowed_urls"], "file:///srv/t\\tore_v2\\models/resnet18.mar")  # its dot stays a dot


def test_tsvk_reads_the_file_exactly_as_java_does(written):
    config, java = written
    assert read_properties(config) == java


def test_latin1_bytes_and_javas_line_ends_are_read_as_java_reads_them_with_the_line_each_key_starts_on(tmp_path):
    """Bytes are ISO-8859-1 characters; only \\n, \\r and \\r\\n end a line (not \\x85, which str.splitlines
    would split on), and only space, tab and form feed end a key (not \\xa0); the doctor's findings name the
    line a key starts on, read by the same reader."""
    config = tmp_path / "odd.properties"
    config.write_bytes(b"caf\xe9=cr\xe8me\r\nno\xa0break=1\x85more\rcontinued=a \\\n  b\nlast=\\u00e9\n")
    read = {"caf\xe9": "cr\xe8me", "no\xa0break": "1\x85more", "continued": "a b", "last": "\xe9"}
    assert read_properties(config) == java_reads(config) == read
    assert read_doctor_properties(config).lines == {"caf\xe9": 1, "no\xa0break": 2, "continued": 3, "last": 5}
