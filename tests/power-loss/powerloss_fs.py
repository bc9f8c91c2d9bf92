#!/usr/bin/python3
"""A FUSE file system that forgets, at a power loss, every write not made durable by fsync.

    powerloss_fs.py [--fsync-delay-ms N] BACKING MOUNT

Mounts MOUNT over the directory BACKING. What a program writes under MOUNT reads back at once, as
on any file system, but only an fsync (or fdatasync) of a file writes that file's data through to
BACKING. Writing the line "powerloss" to this program's standard input is the power going off: every
write not fsynced since is dropped, later writes fail, and the program answers with one line,
"dropped BYTES bytes in FILES files (WAL: WAL_BYTES bytes)". Unmount MOUNT (umount) to end it. What
is left in BACKING is what a disk that honours fsync, and nothing more, would hold after the power
came back: mount it again (a new run of this program) and start the program under test on it.
With --fsync-delay-ms, each fsync takes that long before it writes anything through, as on a slow
disk: a program that answers before its fsync returned is then caught with unsynced data far more
often. A power loss during that wait drops what the fsync had not written yet.

Data only: creating, deleting and renaming files and directories reach BACKING at once, as a
journalling file system (ext4, xfs) makes them durable with the next fsync of any file. Byte-range
locks are the kernel's own (this file system does not implement them), so they work between
processes as on a local disk. Used by tests/Farm.EndToEnd.Tests/PowerLossTests.cs; needs Debian's
python3-fusepy and libfuse2, and root (or /dev/fuse and fusermount).
"""

import errno
import os
import sys
import threading
import time

import fusepy

PAGE = 4096


class Unsynced:
    """One file's writes since its last fsync: whole pages, the file's size, and how far it was cut."""

    def __init__(self, size):
        self.pages = {}
        # Page -> how many writes changed it: an fsync forgets a page only if none came after its snapshot.
        self.versions = {}
        self.size = size
        # Bytes of the backing file at or after this offset are gone (a truncate not yet synced).
        self.cut_at = size


class PowerLossFs(fusepy.Operations):
    # Not implemented, so the kernel keeps byte-range locks itself (SQLite relies on them).
    lock = None
    bmap = None
    ioctl = None
    getxattr = None
    listxattr = None
    setxattr = None
    removexattr = None

    def __init__(self, backing, fsync_delay):
        self.backing = os.path.realpath(backing)
        self.fsync_delay = fsync_delay
        self.gate = threading.Lock()
        self.unsynced = {}
        self.powered = True

    def _real(self, path):
        return os.path.join(self.backing, path.lstrip('/'))

    def _check_power(self):
        if not self.powered:
            raise fusepy.FuseOSError(errno.EIO)

    # ---- reading and writing through the unsynced pages ----

    def _backing_page(self, fd, state, page):
        """A page as the backing file holds it, with what a truncate not yet synced removed."""
        start = page * PAGE
        data = bytearray(os.pread(fd, PAGE, start)) if start < state.cut_at else bytearray()
        keep = max(0, min(PAGE, state.cut_at - start))
        del data[keep:]
        data.extend(b'\0' * (PAGE - len(data)))
        return data

    def _state(self, path, fd):
        state = self.unsynced.get(path)
        if state is None:
            state = self.unsynced[path] = Unsynced(os.fstat(fd).st_size)
        return state

    def read(self, path, size, offset, fh):
        with self.gate:
            state = self.unsynced.get(path)
            if state is None:
                return os.pread(fh, size, offset)
            end = min(offset + size, state.size)
            out = bytearray()
            position = offset
            while position < end:
                page, within = divmod(position, PAGE)
                data = state.pages.get(page)
                if data is None:
                    data = self._backing_page(fh, state, page)
                take = min(PAGE - within, end - position)
                out += data[within:within + take]
                position += take
            return bytes(out)

    def write(self, path, data, offset, fh):
        with self.gate:
            self._check_power()
            state = self._state(path, fh)
            position, written = offset, 0
            while written < len(data):
                page, within = divmod(position, PAGE)
                buffer = state.pages.get(page)
                if buffer is None:
                    buffer = state.pages[page] = self._backing_page(fh, state, page)
                take = min(PAGE - within, len(data) - written)
                buffer[within:within + take] = data[written:written + take]
                state.versions[page] = state.versions.get(page, 0) + 1
                position += take
                written += take
            state.size = max(state.size, offset + len(data))
            return len(data)

    def truncate(self, path, length, fh=None):
        with self.gate:
            self._check_power()
            fd = fh if fh is not None else os.open(self._real(path), os.O_RDONLY)
            try:
                state = self._state(path, fd)
            finally:
                if fh is None:
                    os.close(fd)
            state.size = length
            state.cut_at = min(state.cut_at, length)
            last = length // PAGE
            for page in [p for p in state.pages if p > last or (p == last and length % PAGE == 0)]:
                del state.pages[page]
            if last in state.pages:
                buffer = state.pages[last]
                buffer[length % PAGE:] = b'\0' * (PAGE - length % PAGE)
            for page in state.pages:
                if page >= last:
                    state.versions[page] = state.versions.get(page, 0) + 1

    def fsync(self, path, datasync, fh):
        # What the fsync makes durable is what was written before it was called: later writes may
        # reach the disk with it on a real one, but nobody may count on them.
        with self.gate:
            self._check_power()
            state = self.unsynced.get(path)
            snapshot = None if state is None else (
                {page: (bytes(buffer), state.versions.get(page, 0)) for page, buffer in state.pages.items()},
                state.size, state.cut_at)
        if self.fsync_delay:
            time.sleep(self.fsync_delay)
        with self.gate:
            self._check_power()
            # A handle of its own: the caller's may be read-only (an fsync needs none to write).
            fd = os.open(self._real(path), os.O_RDWR)
            try:
                if snapshot is not None:
                    pages, size, cut_at = snapshot
                    if cut_at < os.fstat(fd).st_size:
                        os.ftruncate(fd, cut_at)
                    for page, (data, _) in sorted(pages.items()):
                        start = page * PAGE
                        if start < size:
                            os.pwrite(fd, data[:min(PAGE, size - start)], start)
                    os.ftruncate(fd, size)
                    self._written_through(path, pages, size, cut_at)
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

    def _written_through(self, path, pages, size, cut_at):
        """Forgets what a snapshot wrote to the backing file, keeping what was written since."""
        state = self.unsynced.get(path)
        if state is None:
            return
        for page, (_, version) in pages.items():
            if page in state.pages and state.versions.get(page, 0) == version:
                del state.pages[page]
        # The backing file now holds the snapshot's bytes up to its size; a truncate since still cuts.
        state.cut_at = size if state.cut_at == cut_at else min(state.cut_at, size)
        if not state.pages and state.size == size and state.cut_at == size:
            del self.unsynced[path]

    def fsyncdir(self, path, datasync, fh):
        return 0

    def power_loss(self):
        with self.gate:
            self.powered = False
            dropped = sum(len(s.pages) * PAGE for s in self.unsynced.values())
            wal = sum(len(s.pages) * PAGE for p, s in self.unsynced.items() if p.endswith('-wal'))
            files = len(self.unsynced)
            self.unsynced.clear()
            return dropped, files, wal

    # ---- files ----

    def getattr(self, path, fh=None):
        with self.gate:
            st = os.lstat(self._real(path))
            result = {key: getattr(st, key) for key in (
                'st_atime', 'st_ctime', 'st_gid', 'st_mode', 'st_mtime', 'st_nlink', 'st_size', 'st_uid')}
            state = self.unsynced.get(path)
            if state is not None:
                result['st_size'] = state.size
            return result

    def open(self, path, flags):
        mode = os.O_RDWR if flags & (os.O_WRONLY | os.O_RDWR) else os.O_RDONLY
        return os.open(self._real(path), mode)

    def create(self, path, mode, fi=None):
        self._check_power()
        return os.open(self._real(path), os.O_RDWR | os.O_CREAT, mode)

    def release(self, path, fh):
        os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def unlink(self, path):
        with self.gate:
            self._check_power()
            os.unlink(self._real(path))
            self.unsynced.pop(path, None)

    def rename(self, old, new):
        with self.gate:
            self._check_power()
            os.rename(self._real(old), self._real(new))
            self.unsynced.pop(new, None)
            moved = {p: s for p, s in self.unsynced.items() if p == old or p.startswith(old + '/')}
            for p, s in moved.items():
                del self.unsynced[p]
                self.unsynced[new + p[len(old):]] = s

    def link(self, target, source):
        os.link(self._real(source), self._real(target))

    def symlink(self, target, source):
        os.symlink(source, self._real(target))

    def readlink(self, path):
        return os.readlink(self._real(path))

    def mknod(self, path, mode, dev):
        os.mknod(self._real(path), mode, dev)

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._real(path), times)

    def access(self, path, amode):
        if not os.access(self._real(path), amode):
            raise fusepy.FuseOSError(errno.EACCES)

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in (
            'f_bavail', 'f_bfree', 'f_blocks', 'f_bsize', 'f_favail', 'f_ffree', 'f_files', 'f_flag', 'f_frsize', 'f_namemax')}

    # ---- directories ----

    def mkdir(self, path, mode):
        self._check_power()
        os.mkdir(self._real(path), mode)

    def rmdir(self, path):
        self._check_power()
        os.rmdir(self._real(path))

    def readdir(self, path, fh):
        return ['.', '..'] + os.listdir(self._real(path))

    def init(self, path):
        print('ready', flush=True)


def main():
    args = sys.argv[1:]
    fsync_delay = 0.0
    if len(args) == 4 and args[0] == '--fsync-delay-ms':
        fsync_delay = int(args[1]) / 1000
        args = args[2:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    backing, mount = args
    fs = PowerLossFs(backing, fsync_delay)

    def commands():
        for line in sys.stdin:
            if line.strip() == 'powerloss':
                dropped, files, wal = fs.power_loss()
                print(f'dropped {dropped} bytes in {files} files (WAL: {wal} bytes)', flush=True)

    threading.Thread(target=commands, daemon=True).start()
    # attr_timeout/entry_timeout 0: sizes come from here every time (they change with unsynced writes).
    fusepy.FUSE(fs, mount, foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0, negative_timeout=0)


if __name__ == '__main__':
    main()
