"""`make demo` and the `mediacrawler` command end to end: what the README promises a new user.

One real demo run (sandbox subprocess, every demo job, media included), its library (readable hard links with the
publish times), `mediacrawler verify` on its store, `mediacrawler export --format csv` read back, a flipped byte
that verify must name, and a second demo run that stores nothing new, keeps the first run's records and leaves
the library as it was.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import av
import pytest

from mediacrawler.demo import DEMO_JOBS
from mediacrawler_sandbox import bilibili, video

ROOT = Path(__file__).resolve().parent.parent


def mediacrawler(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mediacrawler", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def summary(stdout: str) -> dict[str, list[str]]:
    rows = [line.split() for line in stdout.splitlines()]
    jobs = ("weibo-", "bilibili-", "facebook-", "xhs-", "douyin-")
    return {row[0]: row[1:] for row in rows if row and (row[0] == "total" or row[0].startswith(jobs))}


def library_tree(out: Path) -> dict[str, tuple[int, float]]:
    """Each file of the demo's library (its path in the library) with its inode and mtime."""
    root = out / "library"
    return {p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime) for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.slow
def test_demo_crawls_every_job_and_verify_checks_its_store(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    # The records database where -s says (every command takes the settings of a crawl, -s among them).
    database = tmp_path / "demo-records.sqlite3"
    db = ("-s", f"RECORDS_DB={database}")
    first = mediacrawler("demo", "--out", str(out), *db)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = summary(first.stdout)
    assert len(rows) == len(DEMO_JOBS) + 1
    assert all(row[-1] == "finished" for job, row in rows.items() if job != "total"), first.stdout
    posts, comments, pages, media, new, failed = (int(x) for x in rows["total"][:6])
    assert posts > 100 and pages > 10 and media > 200 and new > 0 and failed == 0, first.stdout
    records = [json.loads(line) for path in out.glob("*/*.jsonl") if not path.name.endswith(".comments.jsonl")
               for line in path.read_text().splitlines()]
    assert len(records) == posts
    # One job per platform with comments (Weibo, Bilibili, Facebook): every comment once, in its own file.
    threads = [json.loads(line) for path in out.glob("*/*.comments.jsonl")
               for line in path.read_text().splitlines()]
    assert comments > 100 and len(threads) == comments == len({(c["platform"], c["comment_id"]) for c in threads})
    assert {c["platform"] for c in threads} == {"weibo", "bilibili", "facebook"}
    assert all(int(row[1]) > 0 for job, row in rows.items() if job in (
        "weibo-uid-1669879400", "bilibili-mid-2", "facebook-page-100000000000001")), first.stdout
    objects = sorted(p for p in (out / "files" / "objects").rglob("*") if p.is_file())
    assert objects and any(p.suffix == ".mp4" for p in objects)
    # Every distinct content stored exactly once, and every asset pointing at a stored file with its hash.
    assets = [m for r in records + threads for post in (r, r.get("reposted") or {})
              for m in post.get("media") or []]
    stored = {m["sha256"]: m["path"] for m in assets if m["status"] in ("downloaded", "deduplicated", "uptodate")}
    # A subtitle's SRT is a file of its own, recorded on its asset (derived).
    stored.update({d["sha256"]: d["path"] for m in assets for d in (m.get("derived") or {}).values()})
    assert len(stored) == len(objects) and all((out / "files" / p).is_file() for p in stored.values())
    assert all(Path(p).name.startswith(sha) for sha, p in stored.items())
    # Every media kind is in the demo, stored: pictures, videos, audio, Live Photo clips and covers, and
    # Douyin's own Live Photo clip and video cover among them (#23).
    kept = [m for m in assets if m["sha256"]]
    assert {m["kind"] for m in kept} >= {"image", "video", "audio"}
    by_platform = {(r["platform"], bool(m["live_of"]), bool(m["cover_of"])) for r in records
                   for m in r.get("media") or [] if m["sha256"]}
    assert {("weibo", True, False), ("weibo", False, True), ("douyin", True, False), ("douyin", False, True),
            ("bilibili", False, True), ("facebook", False, True)} <= by_platform, sorted(by_platform)
    # Bilibili's upload without DASH: its durl segments joined into one stored MP4 of the full duration, with the
    # part's two chapters in it (-a chapters=true), as a player reads them.
    [durl] = [r for r in records if r["post_id"] == bilibili.DURL_BVID]
    [joined] = [m for m in durl["media"] if m["kind"] == "video"]
    assert joined["status"] == "downloaded" and len(joined["renditions"][0]["segments"]) == bilibili.DURL_SEGMENTS
    with av.open(str(out / "files" / joined["path"])) as container:
        assert abs(container.duration / 1_000_000 - video.DURATION) < 0.2
        assert container.streams.video and container.streams.audio
        assert [c["metadata"]["title"] for c in container.chapters()] == ["开场", "结尾 & 彩蛋"]
    assert sum(1 for p in objects if p.name.startswith(joined["sha256"])) == 1

    # The library: every stored file under a readable path, a hard link to its object (the same inode), its mtime
    # the publish time of its post (the earliest, for bytes that several posts share: one inode, one mtime).
    library = library_tree(out)
    by_inode = {(out / "files" / p).stat().st_ino: p for p in stored.values()}
    assert {ino for ino, _ in library.values()} == set(by_inode), "a stored file is missing from the library"
    published: dict[int, float] = {}
    for r in records:
        for post in (r, r.get("reposted") or {}):
            if not post.get("created_at"):
                continue
            when = datetime.fromisoformat(post["created_at"].replace("Z", "+00:00")).timestamp()
            for m in post.get("media") or []:
                for obj in [m] + list((m.get("derived") or {}).values()) if m["sha256"] else []:
                    ino = (out / "files" / obj["path"]).stat().st_ino
                    published[ino] = min(published.get(ino, when), when)
    assert published and all(mtime == published.get(ino, mtime) for ino, mtime in library.values())
    bili = [p for p in library if p.startswith("bilibili/")]
    assert any(re.fullmatch(r"bilibili/.+ \(\d+\)/\d{4}-\d\d-\d\d BV\w+/01 video\.mp4", p) for p in bili), bili
    assert any(p.endswith("/01 cover.jpg") for p in bili) and any(p.endswith("/01 video.zh-CN.srt") for p in bili)
    weibo_authors = {p.split("/")[1] for p in library if p.startswith("weibo/")}
    assert any(a.endswith(" (7365120894)") for a in weibo_authors), weibo_authors

    clean = mediacrawler("verify", "--store", str(out / "files"), *db)  # the records database's media rows too
    assert clean.returncode == 0, clean.stdout + clean.stderr

    # `mediacrawler export --format csv`: flat columns that the csv module reads back, the values of the records,
    # from the records database (one row per post; the original of a repost is a post of its own there).
    exported = mediacrawler("export", "--format", "csv", "--out", str(out / "posts.csv"), *db,
                            "-s", f"FILES_STORE={out / 'files'}")
    assert exported.returncode == 0 and "JSON Lines" not in exported.stderr, exported.stderr
    raw = (out / "posts.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    rows = list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    latest = {(r["platform"], r["post_id"]): r for r in records}
    originals = {(r["platform"], r["reposted"]["post_id"]): r["reposted"] for r in records if r.get("reposted")}
    assert sorted((r["platform"], r["post_id"]) for r in rows) == sorted({*latest, *originals})
    for row in rows:
        record = latest.get((row["platform"], row["post_id"])) or originals[(row["platform"], row["post_id"])]
        author = record.get("author") or {}
        assert row["author_id"] == (author.get("id") or "") and row["author_name"] == (author.get("name") or "")
        assert row["text"] == record["text"] and row["created_at"] == (record["created_at"] or "")
        assert row["likes"] == str(record["metrics"]["likes"] if record["metrics"]["likes"] is not None else "")
        paths = [p for p in row["media_paths"].split("|") if p]
        assert len(paths) == sum(1 for m in record["media"] if m["sha256"])
        assert all(p in library for p in paths) and (not row["first_image"] or row["first_image"] in paths)
        assert "Author(" not in row["author_name"] and "MediaAsset(" not in row["media_paths"]
    # The comments of the crawl in the database: one row each, their pictures linked (comment_media), exported
    # with their library paths under their posts' folders.
    exported = mediacrawler("export", "--kind", "comments", "--out", str(out / "comments.csv"), *db,
                            "-s", f"FILES_STORE={out / 'files'}")
    assert exported.returncode == 0 and "JSON Lines" not in exported.stderr, exported.stderr
    rows = list(csv.DictReader(io.StringIO((out / "comments.csv").read_text("utf-8-sig"), newline="")))
    by_id = {(c["platform"], c["comment_id"]): c for c in threads}
    assert sorted((r["platform"], r["comment_id"]) for r in rows) == sorted(by_id)
    pictured = 0
    for row in rows:
        thread = by_id[(row["platform"], row["comment_id"])]
        assert (row["post_id"], row["text"], row["likes"]) == (
            thread["post_id"], thread["text"], str(thread["metrics"]["likes"] if thread["metrics"]["likes"] is not
                                                   None else ""))
        paths = [p for p in row["media_paths"].split("|") if p]
        assert len(paths) == sum(1 for m in thread["media"] if m["sha256"]) and all(p in library for p in paths)
        assert all(f"/comments/{row['comment_id']} " in p for p in paths)
        pictured += bool(paths)
    assert pictured > 0, "no comment with a picture in the demo"

    victim = next(p for p in objects if p.suffix == ".jpg")
    original, touched = victim.read_bytes(), victim.stat()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    broken = mediacrawler("verify", "--store", str(out / "files"))
    assert broken.returncode != 0 and victim.name[:16] in broken.stdout + broken.stderr
    victim.write_bytes(original)
    os.utime(victim, ns=(touched.st_atime_ns, touched.st_mtime_ns))  # as it was, for the library's check below

    # The second run is incremental: each source stops at its high-water mark, nothing is downloaded again.
    before = {path.name: path.read_text("utf-8").splitlines() for path in out.glob("*/*.jsonl")
              if not path.name.endswith(".comments.jsonl")}
    comment_files = {path: path.read_bytes() for path in out.glob("*/*.comments.jsonl")}
    assert sum(map(len, before.values())) == posts
    second = mediacrawler("demo", "--out", str(out), *db)
    assert second.returncode == 0, second.stderr[-3000:]
    # ... and it keeps the first run's records: every file holds at least the lines it held (the same ids).
    after = {path.name: path.read_text("utf-8").splitlines() for path in out.glob("*/*.jsonl")
             if not path.name.endswith(".comments.jsonl")}
    # The threads were walked down to their marks: no comment again.
    assert {path: path.read_bytes() for path in out.glob("*/*.comments.jsonl")} == comment_files
    assert set(after) == set(before)
    for name, lines in before.items():
        assert after[name][:len(lines)] == lines, name
        ids = [json.loads(line)["post_id"] for line in after[name]]
        assert {json.loads(line)["post_id"] for line in lines} <= set(ids), name
    # Nothing new on the unchanged sandbox, and it says so. The listings stop at their marks (their files are
    # unchanged); the list of items (Douyin) is read again as asked: the same posts again, said apart.
    lists = {name for name in after if name.startswith("douyin-")}
    assert {n: after[n] for n in after if n not in lists} == {n: before[n] for n in before if n not in lists}
    for name in lists:
        assert {json.loads(line)["post_id"] for line in after[name]} == \
            {json.loads(line)["post_id"] for line in before[name]}, name
    now = sum(map(len, after.values()))
    again = now - posts
    assert f"this run: 0 new posts, 0 new comments, 0 new media files; records: {posts} before, {now} now" in \
        second.stdout, \
        second.stdout
    note = f"({again} of them the same posts read again: a list of items is read on every run)"
    assert again == 0 or note in second.stdout
    # The second run changed nothing in the library: the same names, inodes and times.
    assert library_tree(out) == library
    again = summary(second.stdout)
    assert all(row[-1] == "finished" for job, row in again.items() if job != "total"), second.stdout
    assert all(int(row[0]) == int(row[1]) == 0 for job, row in again.items()
               if job.startswith(("weibo-", "bilibili-", "facebook-")))
    assert int(again["total"][4]) == 0 and int(again["total"][5]) == 0, second.stdout


def test_the_douyin_demo_job_has_the_album_with_its_live_photo() -> None:
    from mediacrawler_sandbox import douyin

    [(_, args)] = [job for job in DEMO_JOBS if job[0] == "douyin"]
    assert douyin.ALBUM_AWEME in args["aweme"].split(",") and douyin.ALBUM_LIVE_IMAGES
    assert any(a in args["aweme"] for a in douyin.VIDEO_AWEMES)  # and a video, with its cover

