"""The library (mediacrawler/library.py, pipelines/library.py): safe and stable names, hard links into a real
content-addressed store, idempotent runs, renamed authors, comments' pictures, and what verify finds in it."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from itemadapter import ItemAdapter
from scrapy.exceptions import NotConfigured
from scrapy.utils.misc import build_from_crawler
from scrapy.utils.test import get_crawler

from mediacrawler.items import Author, Comment, MediaAsset, Post
from mediacrawler.library import (COMPONENT_MAX_BYTES, Library, LibraryTemplate, check_library,
                                  default_library_dir, safe_component)
from mediacrawler.media.store import ContentAddressedStore
from mediacrawler.pipelines.library import LibraryPipeline
from mediacrawler_sandbox.media import generic_image
from tests.test_pipeline_dedupe import run_coro
from tests.utils import project_crawler

TEMPLATE = "{platform}/{author_name} ({author_id})/{date:%Y-%m-%d} {post_id}/{index:02d} {kind}.{ext}"
WINDOWS_RESERVED = set('<>:"/\\|?*')
HOSTILE = ["..", ".", "CON", "con.jpg", "😀" * 75, "a/b", "a\\b", "trailing.", "trailing", "  ", "", "nul",
           "COM1", "a:b*c?", "tab\there", "x" * 300]


def is_safe(name: str) -> bool:
    return (bool(name) and name not in (".", "..") and not WINDOWS_RESERVED & set(name)
            and not any(ord(c) < 32 or ord(c) == 127 for c in name) and not name.endswith((".", " "))
            and len(name.encode()) <= COMPONENT_MAX_BYTES
            and name.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", "COM1", "LPT1"})


def test_hostile_names_become_safe_and_distinct() -> None:
    safe = [safe_component(n) for n in HOSTILE]
    assert all(is_safe(s) for s in safe), safe
    # Distinct but for what no file system can tell apart anyway (surrounding spaces, empty).
    assert len(set(safe)) == len(HOSTILE) - 1, safe
    assert safe_component("..") == "．．" and safe_component("CON") == "_CON" and safe_component("a/b") == "a／b"
    emoji = safe_component("😀" * 75)
    assert emoji.startswith("😀") and set(emoji) == {"😀"}  # cut at a character, never inside one
    assert safe_component("x" * 300 + ".jpg", keep_ext=True).endswith("x.jpg")


def post(author: Author | None, *media: MediaAsset, post_id: str = "5001", created: str | None = None,
         reposted: Post | None = None) -> Post:
    return Post(platform="weibo", post_id=post_id, url=f"https://m.weibo.cn/detail/{post_id}", author=author,
                created_at=created or "2026-03-04T05:06:07Z", media=list(media), reposted=reposted)


@pytest.mark.parametrize("name", ["..", "CON", "😀" * 75, "a/b", "trailing.", "/etc/passwd", "../../x"])
def test_hostile_authors_map_to_safe_distinct_paths_inside_the_library(tmp_path: Path, name: str) -> None:
    store, lib = _store_and_library(tmp_path)
    other = _stored(store, 2)
    entries = lib.entries(post(Author(id="42", name=name), other))
    [entry] = entries
    assert all(is_safe(part) for part in (*entry.folder, entry.name)), entry
    assert entry.folder[1].endswith(" (42)")
    lib.place(post(Author(id="42", name=name), other))
    placed = lib.root.joinpath(*entry.folder, entry.name)
    assert placed.is_file() and Path(os.path.realpath(placed)).is_relative_to(os.path.realpath(lib.root))


def test_hostile_authors_do_not_collide(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    asset = _stored(store, 3)
    names = ["..", "CON", "😀" * 75, "a/b", "trailing.", "trailing", "a／b"]
    paths = {lib.entries(post(Author(id=str(n), name=name), asset))[0].relpath for n, name in enumerate(names)}
    assert len(paths) == len(names)
    # And without ids to tell them apart, the names alone still differ (but the full-width twin of a/b).
    alone = LibraryTemplate("{author_name}/{post_id}/{index}.{ext}")
    folders = {alone.render_dirs({"author_name": n, "post_id": "1"})[0] for n in names}
    assert len(folders) == len(names) - 1


def test_templates_that_could_leave_the_library_are_refused() -> None:
    for bad in ("/abs/{post_id}/{index}.{ext}", "C:/x/{post_id}/{index}", "{platform}/../{post_id}/{index}",
                "{platform}/{index}.{ext}", "{post_id}", "{nope}/{post_id}/{index}", "{post_id}/{index!r}",
                "{post_id}/{kind:02d}", "{post_id}//{index}"):
        with pytest.raises(ValueError):
            LibraryTemplate(bad)
    LibraryTemplate(TEMPLATE)


def _store_and_library(tmp_path: Path, template: str = TEMPLATE) -> tuple[ContentAddressedStore, Library]:
    store = ContentAddressedStore(tmp_path / "files", fsync=False)
    return store, Library(default_library_dir(str(store.root)), store_root=store.root, template=template)


def _stored(store: ContentAddressedStore, seed: int, *, kind: str = "image", key: str | None = None,
            **fields: object) -> MediaAsset:
    data = generic_image(seed)
    persisted = store.persist_bytes(data, ext=".jpg")
    return MediaAsset(kind=kind, key=key or f"k{seed}", url=f"https://cdn.example/{seed}.jpg",
                      sha256=persisted.sha256, path=persisted.relpath, size=persisted.size, mime="image/jpeg",
                      status="downloaded", **fields)  # type: ignore[arg-type]


def _tree(root: Path) -> dict[str, tuple[int, float]]:
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime) for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_post_is_linked_same_inode_publish_time_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    pic1, pic2 = _stored(store, 10), _stored(store, 11)
    video = MediaAsset(kind="video", key="v", url="https://cdn.example/v.mp4", status="failed", error="http-404")
    cover = _stored(store, 12, key="cover", cover_of="v")
    live = _stored(store, 13, kind="video", key="live", live_of="k10")
    item = post(Author(id="7365120894", name="猫咪 日记"), pic1, pic2, video, cover, live)
    counts = lib.place(item)
    assert counts["created"] == 4
    assert lib.root == tmp_path / "library"
    tree = _tree(lib.root)
    folder = "weibo/猫咪 日记 (7365120894)/2026-03-04 5001"
    assert set(tree) == {f"{folder}/01 image.jpg", f"{folder}/02 image.jpg", f"{folder}/03 cover.jpg",
                         f"{folder}/01 live.jpg"}
    for asset, name in ((pic1, "01 image.jpg"), (pic2, "02 image.jpg"), (cover, "03 cover.jpg")):
        placed, obj = (lib.root / folder / name).stat(), (store.root / str(asset.path)).stat()
        assert (placed.st_ino, placed.st_dev) == (obj.st_ino, obj.st_dev) and placed.st_nlink == 2
    published = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()
    assert {mtime for _, mtime in tree.values()} == {published}
    # The same post again: nothing moves, nothing is relinked.
    assert lib.place(item)["kept"] == 4 and _tree(lib.root) == tree
    fresh = Library(lib.root, store_root=store.root, template=TEMPLATE)  # a later run (another process)
    assert fresh.place(item) == {**counts, "created": 0, "kept": 4} and _tree(lib.root) == tree
    assert check_library(lib.root, store_root=store.root).stray == []


def test_shared_bytes_carry_the_earliest_publish_time(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    same = _stored(store, 20)
    lib.place(post(Author(id="1", name="a"), same, post_id="2", created="2026-05-01T00:00:00Z"))
    lib.place(post(Author(id="1", name="a"), same, post_id="1", created="2026-01-01T00:00:00Z"))
    lib.place(post(Author(id="1", name="a"), same, post_id="2", created="2026-05-01T00:00:00Z"))
    mtimes = {p.stat().st_mtime for p in lib.root.rglob("*.jpg")}
    assert mtimes == {datetime(2026, 1, 1, tzinfo=UTC).timestamp()}


def test_a_renamed_author_moves_the_folder_instead_of_duplicating_it(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    first, second = _stored(store, 30), _stored(store, 31)
    lib.place(post(Author(id="99", name="old name"), first, post_id="1"))
    lib.place(post(Author(id="199", name="someone else"), first, post_id="3"))
    later = Library(lib.root, store_root=store.root, template=TEMPLATE)
    counts = later.place(post(Author(id="99", name="new name"), second, post_id="2"))
    assert counts["moved"] == 1
    authors = sorted(p.name for p in (lib.root / "weibo").iterdir())
    assert authors == ["new name (99)", "someone else (199)"]
    assert sorted(p.name for p in (lib.root / "weibo" / "new name (99)").iterdir()) == [
        "2026-03-04 1", "2026-03-04 2"]


def test_a_repost_original_goes_under_its_own_author(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    original = post(Author(id="5", name="origin"), _stored(store, 40), post_id="900")
    lib.place(post(Author(id="6", name="reposter"), post_id="901", reposted=original))
    assert [str(p.relative_to(lib.root)) for p in lib.root.rglob("*.jpg")] == [
        "weibo/origin (5)/2026-03-04 900/01 image.jpg"]


def test_subtitles_and_danmaku_are_named_after_their_video(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    video = _stored(store, 50, kind="video", key="BV1:7")
    sub = _stored(store, 51, kind="subtitle", key="BV1:7:ai-zh")
    srt = store.persist_bytes(b"1\n00:00:00,000 --> 00:00:01,000\nhi\n", ext=".srt")
    sub.derived = {"srt": {"sha256": srt.sha256, "path": srt.relpath, "size": srt.size}}
    danmaku = _stored(store, 52, kind="danmaku", key="BV1:7")
    lib.place(post(Author(id="2", name="up"), video, sub, danmaku, post_id="BV1"))
    names = sorted(p.name for p in lib.root.rglob("*") if p.is_file())
    # The objects are JPEGs here (their extension comes from the store): the names are what matters.
    assert names == ["01 video.ai-zh.jpg", "01 video.ai-zh.srt", "01 video.danmaku.jpg", "01 video.jpg"]


def test_comment_pictures_go_under_their_post(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    lib.place(post(Author(id="8", name="poster"), _stored(store, 60), post_id="700"))
    comment = Comment(platform="weibo", comment_id="c1", post_id="700", parent_id=None, root_id="c1",
                      author=Author(id="9", name="commenter"), text="nice", created_at="2026-03-05T00:00:00Z",
                      media=[_stored(store, 61)])
    # Another process, which never saw the post: it finds the post's folder on disk.
    later = Library(lib.root, store_root=store.root, template=TEMPLATE)
    assert later.place(comment)["created"] == 1
    assert (lib.root / "weibo/poster (8)/2026-03-04 700/comments/c1 01 image.jpg").is_file()
    orphan = Comment(platform="weibo", comment_id="c2", post_id="701", parent_id=None, root_id="c2", author=None,
                     text="", created_at=None, media=[_stored(store, 62)])
    # A comment before its post (a walked thread's post comes last): it waits, and is placed with the post.
    assert later.place(orphan) == dict.fromkeys(("created", "replaced", "kept", "moved", "unplaced", "missing"), 0)
    assert not list(lib.root.rglob("c2 *"))
    assert later.place(post(Author(id="8", name="poster"), post_id="701"))["created"] == 1
    assert (lib.root / "weibo/poster (8)/2026-03-04 701/comments/c2 01 image.jpg").is_file()


def test_verify_finds_a_stray_file_and_a_link_to_a_missing_object(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    kept, gone = _stored(store, 70), _stored(store, 71)
    lib.symlinks = True  # as on a file system that refuses hard links
    lib.place(post(Author(id="1", name="a"), kept, gone))
    assert all(p.is_symlink() for p in lib.root.rglob("*.jpg"))
    assert check_library(lib.root, store_root=store.root).missing == []
    (store.root / str(gone.path)).unlink()
    (lib.root / "weibo" / "notes.txt").write_text("mine")
    found = check_library(lib.root, store_root=store.root)
    assert found.files == 3
    assert found.missing == ["weibo/a (1)/2026-03-04 5001/02 image.jpg"] and found.stray == ["weibo/notes.txt"]


def test_the_pipeline_links_after_the_store_and_can_be_switched_off(tmp_path: Path) -> None:
    store = ContentAddressedStore(tmp_path / "files", fsync=False)
    crawler = project_crawler(FILES_STORE=str(store.root), LIBRARY_DIR=str(tmp_path / "lib"))
    pipeline = build_from_crawler(LibraryPipeline, crawler)
    item = post(Author(id="3", name="x"), _stored(store, 80))
    assert run_coro(pipeline.process_item(item)) is item
    assert crawler.stats.get_value("library/created") == 1
    assert [p.name for p in (tmp_path / "lib").rglob("*.jpg")] == ["01 image.jpg"]
    assert ItemAdapter(item)["media"][0].path.startswith("objects/")  # the record is left as it was
    with pytest.raises(NotConfigured):
        build_from_crawler(LibraryPipeline, get_crawler(settings_dict={"LIBRARY_ENABLED": False}))


def test_another_device_gets_symlinks_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A library on another file system than the store (a real EXDEV: /dev/shm is a tmpfs where it exists)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system to put the library on")
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(dir=shm, prefix="mediacrawler-library-"))
    try:
        store = ContentAddressedStore(tmp_path / "files", fsync=False)
        lib = Library(root, store_root=store.root, template=TEMPLATE)
        with caplog.at_level("WARNING", logger="mediacrawler.library"):
            lib.place(post(Author(id="1", name="a"), _stored(store, 90), _stored(store, 91)))
        assert sum("symlinks from now on" in r.getMessage() for r in caplog.records) == 1
        placed = sorted(root.rglob("*.jpg"))
        assert len(placed) == 2 and all(p.is_symlink() and p.resolve().is_file() for p in placed)
        assert lib.place(post(Author(id="1", name="a"), _stored(store, 90), _stored(store, 91)))["kept"] == 2
        assert check_library(root, store_root=store.root).stray == []
    finally:
        shutil.rmtree(root)


def test_a_symlinked_folder_pointing_out_of_the_library_is_refused(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    lib.root.mkdir()
    (lib.root / "weibo").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        lib.place(post(Author(id="1", name="a"), _stored(store, 95)))
    assert not any(outside.iterdir())


def test_renamed_authors_among_many_are_found_by_id(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    asset = _stored(store, 96)
    for n in range(300):
        (lib.root / "weibo" / f"someone {n} ({n})").mkdir(parents=True)
    (lib.root / "weibo" / "x (1) (12)").mkdir()  # named like author 1, but the folder of author 12
    assert lib.place(post(Author(id="1", name="renamed"), asset))["moved"] == 1
    assert (lib.root / "weibo" / "renamed (1)").is_dir() and (lib.root / "weibo" / "x (1) (12)").is_dir()
    assert not (lib.root / "weibo" / "someone 1 (1)").exists()
    assert len(list((lib.root / "weibo").iterdir())) == 301


def test_library_rebuild_from_the_json_lines_records_without_a_database(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mediacrawler.commands.library import main as library_main
    from mediacrawler.exporters import JsonLinesExporter

    store, lib = _store_and_library(tmp_path)
    items: list[object] = [post(Author(id="1", name="a"), _stored(store, 100), _stored(store, 101), post_id="1")]
    items.append(Comment(platform="weibo", comment_id="c9", post_id="1", parent_id=None, root_id="c9", author=None,
                         text="", created_at=None, media=[_stored(store, 102)]))
    out = tmp_path / "output" / "weibo"
    out.mkdir(parents=True)
    with (out / "weibo-uid-1.jsonl").open("wb") as f:
        exporter = JsonLinesExporter(f)
        for item in items:
            exporter.export_item(item)
    settings = ["-s", f"OUTPUT_DIR={tmp_path / 'output'}", "-s", f"FILES_STORE={store.root}",
                "-s", f"CHECKPOINT_DIR={tmp_path / 'checkpoints'}"]  # no records database there
    assert library_main(["rebuild", *settings]) == 0
    said = capsys.readouterr()
    assert "3 created" in said.out and "reading the JSON Lines" in said.err
    tree = _tree(lib.root)
    assert sorted(tree) == ["weibo/a (1)/2026-03-04 1/01 image.jpg", "weibo/a (1)/2026-03-04 1/02 image.jpg",
                            "weibo/a (1)/2026-03-04 1/comments/c9 01 image.jpg"]
    (lib.root / "weibo" / "stray.txt").write_text("x")
    assert library_main(["rebuild", "--prune", *settings]) == 0
    assert "3 kept; 1 removed" in capsys.readouterr().out and _tree(lib.root) == tree
    assert library_main([]) == 2


def test_a_subtitle_without_its_video_and_an_object_without_extension(tmp_path: Path) -> None:
    store, lib = _store_and_library(tmp_path)
    sub = _stored(store, 110, kind="subtitle", key="BV9:1:en")
    bare = store.persist_bytes(b"no extension sniffed", ext="")
    odd = MediaAsset(kind="image", key="odd", url="https://cdn.example/odd", sha256=bare.sha256, path=bare.relpath,
                     status="downloaded")
    names = [e.name for e in lib.entries(post(Author(id="2", name="up"), odd, sub, post_id="BV9"))]
    assert names == ["01 image", "02 subtitle.en.jpg"]


def test_library_rebuild_from_the_records_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    from mediacrawler.commands.library import main as library_main
    from mediacrawler.records.rows import Rows, add_record
    from mediacrawler.records.store import open_store

    store, lib = _store_and_library(tmp_path)
    original = post(Author(id="2", name="b"), _stored(store, 110), post_id="2")
    comment = Comment(platform="weibo", comment_id="c9", post_id="1", parent_id=None, root_id="c9", author=None,
                      text="", created_at=None, media=[_stored(store, 112)])
    uri = str(tmp_path / "records.sqlite3")
    db = open_store(uri, now="2026-12-02T00:00:00Z")
    for run_id, name in (("r1", "a"), ("r2", "a renamed")):  # the author renamed between two runs
        rows = Rows()
        # The comment first: the command places posts before comments whatever the database's order.
        reposting = post(Author(id="1", name=name), _stored(store, 111), post_id="1", reposted=original)
        for item in (comment, reposting):
            add_record(rows, dataclasses.asdict(item))
        db.write(rows, run_id=run_id, seen_at="2026-12-02T00:00:00Z")
    db.close()
    settings = ["-s", f"RECORDS_DB={uri}", "-s", f"FILES_STORE={store.root}",
                "-s", f"OUTPUT_DIR={tmp_path / 'no-outputs'}"]
    assert library_main(["rebuild", *settings]) == 0
    said = capsys.readouterr()
    assert "JSON Lines" not in said.err and "3 created" in said.out, said
    assert sorted(_tree(lib.root)) == ["weibo/a renamed (1)/2026-03-04 1/01 image.jpg",
                                       "weibo/a renamed (1)/2026-03-04 1/comments/c9 01 image.jpg",
                                       "weibo/b (2)/2026-03-04 2/01 image.jpg"]
    linked = lib.root / "weibo/b (2)/2026-03-04 2/01 image.jpg"
    assert linked.stat().st_ino == (store.root / str(original.media[0].path)).stat().st_ino
    assert library_main(["rebuild", *settings]) == 0 and "created" not in capsys.readouterr().out
