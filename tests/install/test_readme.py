"""The README's install section: one line per way (pip, uv, archive, image), naming the files dev/release
really makes; the other tests of tests/install run these lines."""

from conftest import REPO, VERSION, readme_install_lines


def test_one_line_per_way_naming_the_release_files(wheel, archive):
    lines = readme_install_lines()
    assert set(lines) == {"pip", "uv", "archive", "image"}, lines
    assert lines["pip"] == f"pip install {wheel.name}", lines["pip"]
    assert lines["uv"] == f"uvx --from ./{wheel.name} tao-slurm mcp", lines["uv"]
    assert lines["archive"].startswith(f"tar -xzf {archive.name} && install "), lines["archive"]
    image = lines["image"]
    assert image.startswith("bash dev/release && podman run "), image
    assert image.endswith(f" -v tao-slurm:/var/lib/tao-slurm localhost/tao-slurm:{VERSION}"), image
    # The volume is where the Dockerfile keeps the service's state.
    assert "VOLUME /var/lib/tao-slurm" in (REPO / "Dockerfile").read_text()
