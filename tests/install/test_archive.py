"""The release archive: its SHA-256 file checks, its executable (installed by the README's line) runs a
job against the sandbox in clean Debian 13 and 11 roots with no compiler and no Python on its path, its
bash completions load and complete, and its zsh/fish completions and man page are there."""

import shutil
import tarfile

from conftest import VERSION, readme_install_lines
from jobs import job_end_to_end, preflight_passes

NAME = f"tao-slurm-{VERSION}-x86_64-linux"


def test_the_archive_holds_what_its_install_note_says(archive):
    members = set(tarfile.open(archive).getnames())
    expected = {
        f"{NAME}/{p}"
        for p in ("tao-slurm", "LICENSE", "INSTALL.md", "completions/tao-slurm.bash", "completions/_tao-slurm",
                  "completions/tao-slurm.fish", "man/tao-slurm.1")
    }
    assert expected <= members, sorted(members)
    with tarfile.open(archive) as tar:
        man = tar.extractfile(f"{NAME}/man/tao-slurm.1").read().decode()
        zsh = tar.extractfile(f"{NAME}/completions/_tao-slurm").read().decode()
        fish = tar.extractfile(f"{NAME}/completions/tao-slurm.fish").read().decode()
        note = tar.extractfile(f"{NAME}/INSTALL.md").read().decode()
    assert ".TH tao-slurm 1" in man and "submit" in man, man[:300]
    assert zsh.startswith("#compdef tao-slurm"), zsh[:100]
    assert "complete -c tao-slurm" in fish and "submit" in fish, fish[:200]
    assert "sha256sum -c" in note and "completions/tao-slurm.bash" in note, note


def unpack(root, archive):
    for f in (archive, archive.with_name(archive.name + ".sha256")):
        shutil.copy(f, root.work / f.name)
    # Checked first, as the install note says; then the README's line.
    assert root.run(f"sha256sum -c {archive.name}.sha256").stdout.strip() == f"{archive.name}: OK"
    root.run(readme_install_lines()["archive"])


def test_the_archive_executable_runs_a_job(root, archive):
    unpack(root, archive)
    # PATH without any Python: the executable needs none.
    path = "/work/home/.local/bin:/usr/bin:/bin"
    assert root.run("command -v tao-slurm", PATH=path).stdout.strip() == "/work/home/.local/bin/tao-slurm"
    root.run("mkdir -p /work/nopython && ln -s /work/home/.local/bin/tao-slurm /work/nopython/")
    assert root.run("tao-slurm --version", PATH="/work/nopython").stdout.strip() == f"tao-slurm {VERSION}"
    preflight_passes(root)
    job_end_to_end(root)


def test_bash_completions_load_and_complete(root, archive):
    unpack(root, archive)
    script = f"""
set -eu
. {NAME}/completions/tao-slurm.bash
complete -p tao-slurm
fn="$(complete -p tao-slurm | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')"
COMP_WORDS=(tao-slurm sub); COMP_CWORD=1; COMP_LINE="tao-slurm sub"; COMP_POINT=${{#COMP_LINE}}
"$fn" tao-slurm sub tao-slurm
printf 'reply:%s\\n' "${{COMPREPLY[@]}}"
COMP_WORDS=(tao-slurm submit --ima); COMP_CWORD=2; COMP_LINE="tao-slurm submit --ima"; COMP_POINT=${{#COMP_LINE}}
"$fn" tao-slurm --ima submit
printf 'reply:%s\\n' "${{COMPREPLY[@]}}"
"""
    out = root.run(script).stdout
    assert out.splitlines()[0].startswith("complete ") and out.splitlines()[0].endswith(" tao-slurm"), out
    replies = [line[len("reply:"):] for line in out.splitlines() if line.startswith("reply:")]
    assert "submit" in replies and "--image" in replies, out
