"""Which filesystem holds the folder resolve hands out, from recorded /proc/self/mountinfo samples, and where that
adds `--safetensors-load-strategy prefetch` to the engine's arguments: exactly where vLLM would not prefetch by
itself and a network or virtual filesystem makes its memory-mapped reads slow."""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from catalog.formats import LoadFormat
from resolver.mounts import ENGINE_PREFETCHES, filesystem_type, mount_of, needs_prefetch, parse_mountinfo
from resolver.resolution import Resolution, engine_args
from resolver.views import Layout

ROOT_EXT4 = "25 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro"
# Recorded lines (ids and options as seen on real hosts), each mounting the cache at /srv/cache.
SAMPLES = {
    "ext4": "98 25 259:3 / /srv/cache rw,relatime shared:50 - ext4 /dev/nvme1n1 rw",
    "xfs": "98 25 259:3 / /srv/cache rw,noatime shared:50 - xfs /dev/md0 rw,attr2,inode64,logbufs=8,logbsize=32k,noquota",
    "overlay": "512 400 0:52 / /srv/cache rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/AB:"
    "/var/lib/docker/overlay2/l/CD,upperdir=/var/lib/docker/overlay2/x/diff,workdir=/var/lib/docker/overlay2/x/work",
    "tmpfs": "98 25 0:60 / /srv/cache rw,nosuid,nodev shared:50 - tmpfs tmpfs rw,size=65536k,inode64",
    "fuseblk": "98 25 8:17 / /srv/cache rw,relatime shared:50 - fuseblk /dev/sdb1 rw,user_id=0,group_id=0,allow_other,blksize=4096",
    "nfs4": "88 25 0:47 / /srv/cache rw,relatime shared:45 - nfs4 10.0.0.5:/export/models rw,vers=4.2,rsize=1048576,"
    "wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.9,local_lock=none,addr=10.0.0.5",
    "nfs": "88 25 0:47 / /srv/cache rw,relatime shared:45 - nfs 10.0.0.5:/export rw,vers=3,rsize=1048576,wsize=1048576,hard,"
    "proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.5,mountvers=3,mountport=20048,mountproto=udp,addr=10.0.0.5",
    "lustre": "90 25 0:49 / /srv/cache rw,relatime shared:47 - lustre 10.0.0.1@o2ib:/scratch rw,flock,lazystatfs,encrypt",
    "virtiofs": "91 25 0:50 / /srv/cache rw,relatime shared:48 - virtiofs models rw",
    "9p": "93 25 0:52 / /srv/cache rw,noatime - 9p drvfs rw,dirsync,aname=drvfs;path=C:\\;uid=1000;gid=1000;symlinkroot=/mnt/,"
    "mmap,access=client,msize=65536,trans=fd,rfd=5,wfd=5",
    "cifs": "94 25 0:53 / /srv/cache rw,relatime shared:51 - cifs //fileserver/models rw,vers=3.1.1,cache=strict,username=ci,"
    "uid=0,noforceuid,gid=0,noforcegid,addr=10.0.0.7,file_mode=0755,dir_mode=0755,soft,nounix,serverino,mapposix,"
    "rsize=4194304,wsize=4194304,bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
    "smb3": "94 25 0:53 / /srv/cache rw,relatime shared:51 - smb3 //fileserver/models rw,vers=3.1.1",
    "ceph": "95 25 0:54 / /srv/cache rw,relatime shared:52 - ceph 10.0.0.1:6789,10.0.0.2:6789:/volumes/models rw,name=ci,"
    "secret=<hidden>,acl,mds_namespace=cephfs",
    "fuse.s3fs": "96 25 0:55 / /srv/cache rw,nosuid,nodev,relatime shared:53 - fuse.s3fs s3fs rw,user_id=0,group_id=0,allow_other",
    "fuse.gcsfuse": "96 25 0:55 / /srv/cache rw,nosuid,nodev,relatime shared:53 - fuse.gcsfuse models-bucket rw,user_id=0,group_id=0",
    "fuse.mountpoint-s3": "96 25 0:55 / /srv/cache rw,nosuid,nodev,noatime shared:53 - fuse.mountpoint-s3 mountpoint-s3 "
    "rw,user_id=0,group_id=0,default_permissions",
    "fuse.juicefs": "96 25 0:55 / /srv/cache rw,relatime shared:53 - fuse.juicefs JuiceFS:models rw,user_id=0,group_id=0,"
    "default_permissions,allow_other",
    "fuse": "96 25 0:55 / /srv/cache rw,relatime shared:53 - fuse models rw,user_id=0,group_id=0",
}
# vLLM prefetches from nfs, nfs4 and lustre by itself; local disks are fast to memory-map.
PREFETCHED = {
    "virtiofs",
    "9p",
    "cifs",
    "smb3",
    "ceph",
    "fuse.s3fs",
    "fuse.gcsfuse",
    "fuse.mountpoint-s3",
    "fuse.juicefs",
    "fuse",
}


def mountinfo(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text("\n".join((ROOT_EXT4, *lines)) + "\n")
    return path


def resolution(filesystem: str | None, **kw: object) -> Resolution:
    base: dict[str, object] = dict(
        name="m",
        hf_repo="org/m",
        revision="a" * 40,
        load_format=LoadFormat.SAFETENSORS,
        model="/srv/cache/models/m/x",
        path=Path("/srv/cache/models/m/x"),
        tokenizer=None,
        files=("config.json",),
        streamed=(),
        bytes=1,
        source="cache",
        layout=Layout.DIR,
        hub_cache=None,
        loader={},
        stream_env={},
        filesystem=filesystem,
    )
    base.update(kw)
    return Resolution(**base)  # type: ignore[arg-type]


PREFETCH = ["--safetensors-load-strategy", "prefetch"]


@pytest.mark.parametrize("fstype", sorted(SAMPLES))
def test_each_recorded_filesystem_is_found_and_gets_the_flag_only_where_it_helps(tmp_path: Path, fstype: str) -> None:
    detected = filesystem_type(Path("/srv/cache/models/m/x"), mountinfo(tmp_path, SAMPLES[fstype]))
    assert detected == fstype
    args = engine_args(resolution(detected))
    assert (args[-2:] == PREFETCH) is (fstype in PREFETCHED), args
    assert ("--safetensors-load-strategy" in resolution(detected).to_json()["engine_args"]) is (fstype in PREFETCHED)


def test_the_longest_mount_point_wins_and_a_mount_on_top_hides_the_one_below(tmp_path: Path) -> None:
    nested = mountinfo(tmp_path, SAMPLES["nfs4"].replace("/srv/cache", "/srv"), SAMPLES["ext4"])
    assert filesystem_type(Path("/srv/cache/models"), nested) == "ext4"
    assert filesystem_type(Path("/srv/other"), nested) == "nfs4"
    assert filesystem_type(Path("/srv/cachex"), nested) == "nfs4"  # a string prefix is not a parent folder
    stacked = mountinfo(tmp_path, SAMPLES["ext4"], SAMPLES["virtiofs"])  # virtiofs mounted over the disk later
    assert filesystem_type(Path("/srv/cache/models"), stacked) == "virtiofs"
    assert filesystem_type(Path("/elsewhere"), stacked) == "ext4"


def test_escaped_mount_points_and_odd_lines(tmp_path: Path) -> None:
    spaced = SAMPLES["virtiofs"].replace("/srv/cache", "/srv/model\\040cache")
    mounts = parse_mountinfo("\n".join([ROOT_EXT4, "garbage", "", spaced]))
    assert [m.mount_point for m in mounts] == ["/", "/srv/model cache"]
    found = mount_of("/srv/model cache/x", mounts)
    assert found is not None and found.fstype == "virtiofs" and found.source == "models"
    assert filesystem_type(Path("/x"), tmp_path / "no-such-mountinfo") is None  # not Linux: unknown, no flag
    assert not needs_prefetch(None)


def test_symlinks_are_followed_to_the_filesystem_holding_the_bytes(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    line = SAMPLES["fuse.s3fs"].replace("/srv/cache", str(real))
    assert filesystem_type(tmp_path / "link", mountinfo(tmp_path, line)) == "fuse.s3fs"


@pytest.mark.parametrize("fstype", sorted(PREFETCHED))
def test_no_flag_where_the_engine_does_not_read_local_safetensors_through_it(fstype: str) -> None:
    streamed = resolution(fstype, load_format=LoadFormat.RUNAI_STREAMER, model="s3://b/m/", streamed=("w.safetensors",))
    assert "--safetensors-load-strategy" not in engine_args(streamed)
    for fmt in (LoadFormat.FASTSAFETENSORS, LoadFormat.PT, LoadFormat.TENSORIZER, LoadFormat.SHARDED_STATE):
        assert "--safetensors-load-strategy" not in engine_args(resolution(fstype, load_format=fmt))
    # vLLM refuses a strategy with its multi-thread loader
    assert "--safetensors-load-strategy" not in engine_args(
        resolution(fstype, loader={"enable_multithread_load": True})
    )
    for fmt in (LoadFormat.AUTO, LoadFormat.SAFETENSORS, LoadFormat.MISTRAL):
        assert engine_args(resolution(fstype, load_format=fmt))[-2:] == PREFETCH
    hf = resolution(fstype, layout=Layout.HF_CACHE, hub_cache=Path("/srv/cache/hub"))
    assert engine_args(hf)[-2:] == PREFETCH  # the engine reads the snapshot's files all the same


# -- the installed engine, read from its source (importing vLLM takes a minute) -------------------------------------
def _weight_utils() -> ast.Module:
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it
    assert spec is not None and spec.origin is not None, "vLLM is part of the dev environment"
    source = Path(spec.origin).parent / "model_executor" / "model_loader" / "weight_utils.py"
    return ast.parse(source.read_text(), str(source))


def test_the_types_we_leave_to_the_engine_are_those_it_prefetches_by_itself() -> None:
    tree = _weight_utils()
    compared = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "is_net_fs" for t in node.targets)
    ]
    assert len(compared) == 1, "vLLM's auto-prefetch rule moved: re-read weight_utils.py and update resolver/mounts.py"
    test = compared[0].value
    assert isinstance(test, ast.Compare) and isinstance(test.comparators[0], ast.Tuple)
    assert {ast.literal_eval(e) for e in test.comparators[0].elts} == set(ENGINE_PREFETCHES)


def test_we_find_the_same_filesystem_as_the_engine_on_this_machine(tmp_path: Path) -> None:
    """vLLM's own `_get_fs_type` (taken from its source) on real folders here agrees with ours."""
    tree = _weight_utils()
    [func] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_get_fs_type"]
    func.returns = None
    for arg in func.args.args:
        arg.annotation = None
    namespace: dict[str, object] = {"os": os}
    exec(compile(ast.Module(body=[func], type_ignores=[]), "weight_utils.py", "exec"), namespace)
    get_fs_type = namespace["_get_fs_type"]
    for folder in (tmp_path, Path.cwd(), Path("/dev/shm"), Path("/proc/self")):
        if folder.exists():
            assert filesystem_type(folder) == (get_fs_type([str(folder / "model.safetensors")]) or None), folder  # type: ignore[operator]
