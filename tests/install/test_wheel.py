"""The wheel: one file with the tao_slurm package and the tao-slurm executable (manylinux_2_17, proven by
auditwheel), installed by pip in clean Debian 13 and 11 roots with no compiler, then the CLI, the SDK
and the MCP server (started by `uvx --from WHEEL`, offline) against the sandbox cluster."""

import asyncio
import shutil
import subprocess
import uuid
import zipfile

from conftest import TOOLS, VERSION, readme_install_lines
from jobs import job_end_to_end, preflight_passes
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client


def test_the_wheel_holds_the_package_and_the_executable_for_glibc_2_17(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert f"tao_slurm-{VERSION}.data/scripts/tao-slurm" in names, sorted(names)
    assert {"tao_slurm/__init__.py", "tao_slurm/_native.abi3.so", "tao_slurm/py.typed"} <= names, sorted(names)
    # auditwheel reads every ELF file in the wheel (the extension and the executable): glibc 2.17 at most.
    shown = subprocess.run([TOOLS / "auditwheel", "show", wheel], capture_output=True, text=True, check=True).stdout
    assert 'consistent with the following platform tag:\n"manylinux_2_17_x86_64"' in shown, shown
    meta = zipfile.ZipFile(wheel).read(f"tao_slurm-{VERSION}.dist-info/METADATA").decode()
    assert "Provides-Extra: s3" in meta and "Requires-Python: >=3.9" in meta, meta


def install(root, wheel):
    """The README's pip line, run in a fresh venv in the root from the release's file (no index)."""
    shutil.copy(wheel, root.work / wheel.name)
    root.run("python3 -m venv /work/venv")
    root.run(readme_install_lines()["pip"], PIP_NO_INDEX="1")


def test_pip_install_then_the_cli_runs_a_job(root, wheel):
    install(root, wheel)
    # The executable itself on the PATH: an ELF file, no Python script in front of it.
    where = root.run("command -v tao-slurm").stdout.strip()
    assert where == "/work/venv/bin/tao-slurm", where
    assert (root.work / "venv/bin/tao-slurm").read_bytes()[:4] == b"\x7fELF"
    assert root.run("tao-slurm --version").stdout.strip() == f"tao-slurm {VERSION}"
    preflight_passes(root)
    job_end_to_end(root)


SDK_EXAMPLE = """
from tao_slurm import SlurmSDK

sdk = SlurmSDK(poll_interval=1)
job = sdk.create_job(image="ubuntu:22.04", command="echo {word}", gpu_count=0, time_hours=0.25)
status = sdk.wait(job.id, timeout=240)
print(status.status)
print(sdk.get_job_logs(job.id))
sdk.close()
"""


def test_pip_install_then_the_sdk_runs_a_job(root, wheel):
    install(root, wheel)
    root.run('python -c "from tao_slurm import SlurmSDK"')
    word = f"sdk-{uuid.uuid4().hex[:12]}"
    (root.work / "example.py").write_text(SDK_EXAMPLE.format(word=word))
    out = root.run("python example.py").stdout
    assert out.splitlines()[0] == "Complete" and word in out, out


def test_uvx_starts_the_mcp_server_offline_and_it_lists_its_tools(root, wheel):
    shutil.copy(wheel, root.work / wheel.name)
    # The README's uvx line, offline: the wheel is the only package it may use (--find-links /work).
    command = readme_install_lines()["uv"].split()
    offline = {"UV_OFFLINE": "1", "UV_FIND_LINKS": "/work", "UV_CACHE_DIR": "/work/uv-cache",
               "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}
    params = StdioServerParameters(command="/bin/bash", args=root.popen_args(*command)[1:], env=root.env(**offline))

    async def session():
        async with Client(stdio_client(params), read_timeout_seconds=120) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("preflight", {})
            return tools, result

    tools, result = asyncio.run(session())
    assert {"submit", "status", "wait", "logs", "cancel", "preflight"} <= tools, tools
    assert not result.is_error, result
    assert result.structured_content["ok"] is True, result
    assert result.structured_content["summary"].startswith("preflight passed"), result
