"""Container images for the real-cluster tests, without a registry and without
a container engine: docker-archive tarballs (the format of `docker save`:
manifest.json, an image config, one layer), which `ctr images import` reads.

    from images import gpuslice_image, pause_image, binary_image
    gpuslice_image("/tmp/x/gpuslice.tar", "gpuslice:test", repo_root, build_dir)

The gpuslice image is deploy/kubernetes/Containerfile carried out by hand: its
COPY lines are read from the file and done from the build tree, over a base
layer made of this machine's own files (a shell and the few tools the
manifests' commands use, and the shared libraries every program needs, found
with ldd) where the Containerfile starts from debian:12-slim. The build
machine is Debian 12, so the libraries are those the Containerfile installs.

Python 3 standard library only.
"""

import hashlib
import io
import json
import os
import re
import shlex
import subprocess
import tarfile

# What the manifests' commands run besides our binaries (the init container
# copies the shim and the simulated driver with sh, mkdir and cp), and what a
# test pod's script uses.
BASE_TOOLS = ("/bin/sh", "/bin/cp", "/bin/mv", "/bin/mkdir", "/bin/cat", "/bin/sleep", "/bin/date",
              "/bin/ls", "/bin/rm", "/usr/bin/env", "/usr/bin/test")
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(RuntimeError):
    pass


def _ldd(path):
    """The shared libraries `path` loads (absolute host paths), the dynamic
    loader included; [] for a static program."""
    r = subprocess.run(["ldd", path], capture_output=True, text=True)
    if r.returncode != 0:
        if "not a dynamic executable" in (r.stdout + r.stderr):
            return []
        raise ImageError(f"ldd {path}: {r.stderr.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m:
            libs.append(m.group(1))
        elif "not found" in line:
            raise ImageError(f"{path}: {line.strip()}")
    return libs


class Layer:
    """The files of one image layer: image path -> what goes there."""

    def __init__(self):
        self.entries = {}

    def add_file(self, image_path, host_path, mode=None):
        """Copies host_path's content (symbolic links followed) to image_path;
        with ELF programs and libraries, every library they load too, at the
        same path as on this machine."""
        if not os.path.isfile(host_path):
            raise ImageError(f"{host_path} is missing (build the project first)")
        st = os.stat(host_path)
        self.entries[image_path] = ("file", host_path, mode if mode is not None else st.st_mode & 0o7777)
        with open(host_path, "rb") as f:
            elf = f.read(4) == b"\x7fELF"
        if elf:
            for lib in _ldd(host_path):
                if lib not in self.entries:
                    self.add_file(lib, lib)

    def add_bytes(self, image_path, data, mode=0o644):
        self.entries[image_path] = ("bytes", data, mode)

    def add_dir(self, image_path, mode=0o755):
        self.entries[image_path] = ("dir", None, mode)

    def write_tar(self, out):
        """Writes the layer as an uncompressed tar (parents before children,
        directories 0755 unless given, root-owned, mtime 0)."""
        dirs = {}
        for p, (kind, _, mode) in self.entries.items():
            parts = p.strip("/").split("/")
            for i in range(1, len(parts)):
                dirs.setdefault("/".join(parts[:i]), 0o755)
            if kind == "dir":
                dirs["/".join(parts)] = mode
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for d in sorted(dirs):
                info = tarfile.TarInfo(d)
                info.type = tarfile.DIRTYPE
                info.mode = dirs[d]
                tar.addfile(info)
            for p in sorted(self.entries):
                kind, src, mode = self.entries[p]
                if kind == "dir":
                    continue
                info = tarfile.TarInfo(p.strip("/"))
                info.mode = mode
                if kind == "file":
                    info.size = os.path.getsize(src)
                    with open(src, "rb") as f:
                        tar.addfile(info, f)
                else:
                    info.size = len(src)
                    tar.addfile(info, io.BytesIO(src))


def write_docker_archive(path, repo_tag, layer, entrypoint=None, cmd=None, env=(PATH_ENV,)):
    """Writes a one-layer image `repo_tag` to `path` (docker-archive)."""
    buf = io.BytesIO()
    layer.write_tar(buf)
    layer_bytes = buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": list(env), "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z",
                     "created_by": "tests/kubernetes/cluster/images.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [repo_tag], "Layers": [layer_name]}]
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        for name, data in ((config_name, config_bytes), (layer_name, layer_bytes),
                           ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, path)
    return path


def base_layer():
    """What debian:12-slim and the Containerfile's apt packages give the
    programs: a shell, a few tools, passwd/group, /tmp."""
    layer = Layer()
    for tool in BASE_TOOLS:
        layer.add_file(tool, os.path.realpath(tool))
    layer.add_bytes("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n"
                    b"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    layer.add_bytes("/etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    layer.add_dir("/tmp", 0o1777)
    layer.add_dir("/root", 0o700)
    return layer


def containerfile_copies(containerfile):
    """[(sources, destination)] of a Containerfile's COPY instructions
    (continuation lines joined)."""
    with open(containerfile) as f:
        text = f.read().replace("\\\n", " ")
    copies = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if not words or words[0].upper() != "COPY":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if len(args) < 2:
            raise ImageError(f"{containerfile}: COPY without a destination: {line.strip()}")
        copies.append((args[:-1], args[-1]))
    return copies


def gpuslice_image(path, repo_tag, repo_root, build_dir):
    """deploy/kubernetes/Containerfile's image, from `build_dir` (its COPY
    sources name build/...: the build directory stands for it)."""
    containerfile = os.path.join(repo_root, "deploy", "kubernetes", "Containerfile")
    layer = base_layer()
    copies = containerfile_copies(containerfile)
    if not copies:
        raise ImageError(f"{containerfile} has no COPY")
    for sources, dest in copies:
        for src in sources:
            rel = src.rstrip("/")
            host = (os.path.join(build_dir, rel[len("build/"):]) if rel.startswith("build/")
                    else os.path.join(repo_root, rel))
            if os.path.isdir(host):
                # COPY DIR/ DEST/: the folder's content.
                for name in sorted(os.listdir(host)):
                    full = os.path.join(host, name)
                    if os.path.isfile(full):
                        layer.add_file(os.path.join(dest, name), full)
            elif dest.endswith("/"):
                layer.add_file(os.path.join(dest, os.path.basename(host)), host)
            else:
                layer.add_file(dest, host)
    return write_docker_archive(path, repo_tag, layer)


def binary_image(path, repo_tag, binary, image_path):
    """An image holding one program (a static Go binary: kube-scheduler) at
    image_path, on PATH."""
    layer = base_layer()
    layer.add_file(image_path, binary, 0o755)
    return write_docker_archive(path, repo_tag, layer)


def pause_image(path, repo_tag, pause_binary):
    """The pod sandbox image: pause.c, linked statically, alone."""
    layer = Layer()
    layer.add_file("/pause", pause_binary, 0o755)
    return write_docker_archive(path, repo_tag, layer, entrypoint=["/pause"], env=())
