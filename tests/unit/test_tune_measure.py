"""What a tune leaves behind in a work folder of its own: configs and logs, not copies of the archives."""

from tsvk_tools.tune.measure import prune_unpacked_archives


def test_the_servers_unpacked_archives_are_removed_and_their_configs_and_logs_kept(tmp_path):
    for server in ("c01", "d01-rule"):
        (tmp_path / server / "run" / "tmp" / "models" / "abc").mkdir(parents=True)
        (tmp_path / server / "run" / "tmp" / "models" / "abc" / "model.so").write_bytes(b"x" * 1024)
        (tmp_path / server / "run" / "logs").mkdir()
        (tmp_path / server / "run" / "logs" / "ts_log.log").write_text("started")
        (tmp_path / server / "config.properties").write_text("models={}")
    prune_unpacked_archives(tmp_path)
    for server in ("c01", "d01-rule"):
        assert not (tmp_path / server / "run" / "tmp").exists()
        assert (tmp_path / server / "run" / "logs" / "ts_log.log").read_text() == "started"
        assert (tmp_path / server / "config.properties").exists()
