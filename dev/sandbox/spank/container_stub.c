/*
 * container_stub: a SPANK stand-in for NVIDIA Pyxis, for the tao-slurm sandbox.
 *
 * It registers the Pyxis command-line options for srun, sbatch and salloc
 * (via spank_option_register() from slurm_spank_init(), so the allocator
 * context sees them too) and, in the remote context, exports what was asked
 * for to the job's tasks as SPANK_CONTAINER_* environment variables.
 * It runs no container: tasks run on the host.
 *
 * Used only by the Slurm 24.11 sandbox (up-24.11.sh), whose daemons run in a chroot: there the
 * unprivileged Enroot cannot start a container (a user namespace cannot be made inside a chroot:
 * "enroot-nsenter: failed to create user namespace: Operation not permitted"). The 22.05 sandbox
 * runs the real Pyxis and Enroot. See dev/sandbox/README.md.
 *
 * Build: gcc -shared -fPIC -o container_stub.so container_stub.c
 * Load:  plugstack.conf line "required /path/container_stub.so"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <slurm/spank.h>

SPANK_PLUGIN(container_stub, 1);

enum {
	OPT_IMAGE = 1,
	OPT_MOUNTS,
	OPT_WORKDIR,
	OPT_NAME,
	OPT_SAVE,
	OPT_ENV,
	OPT_MOUNT_HOME,
	OPT_NO_MOUNT_HOME,
	OPT_REMAP_ROOT,
	OPT_NO_REMAP_ROOT,
	OPT_ENTRYPOINT,
	OPT_NO_ENTRYPOINT,
	OPT_WRITABLE,
	OPT_READONLY,
};

/* string-valued options, indexed by OPT_IMAGE..OPT_ENV */
static char *str_val[OPT_ENV + 1];
static const char *str_env[OPT_ENV + 1] = {
	[OPT_IMAGE] = "SPANK_CONTAINER_IMAGE",
	[OPT_MOUNTS] = "SPANK_CONTAINER_MOUNTS",
	[OPT_WORKDIR] = "SPANK_CONTAINER_WORKDIR",
	[OPT_NAME] = "SPANK_CONTAINER_NAME",
	[OPT_SAVE] = "SPANK_CONTAINER_SAVE",
	[OPT_ENV] = "SPANK_CONTAINER_ENV",
};

/* tri-state flags: -1 = not given, 0 / 1 */
static int mount_home = -1, remap_root = -1, entrypoint = -1, writable = -1;
static int any_option;

static int opt_cb(int val, const char *optarg, int remote);

#define STR_OPT(n, arg, use, v) { n, arg, "[container_stub] " use, 1, v, opt_cb }
#define FLAG_OPT(n, use, v)     { n, NULL, "[container_stub] " use, 0, v, opt_cb }

static struct spank_option options[] = {
	STR_OPT("container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH",
		"image to use (sandbox stub: recorded in SPANK_CONTAINER_IMAGE, no container is run)",
		OPT_IMAGE),
	STR_OPT("container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]",
		"bind mount(s) inside the container", OPT_MOUNTS),
	STR_OPT("container-workdir", "PATH",
		"working directory inside the container", OPT_WORKDIR),
	STR_OPT("container-name", "NAME[:FLAG]",
		"name to use for saving and loading the container", OPT_NAME),
	STR_OPT("container-save", "PATH",
		"save the container state to a squashfs file", OPT_SAVE),
	STR_OPT("container-env", "NAME[,NAME...]",
		"names of environment variables to override with the host value", OPT_ENV),
	FLAG_OPT("container-mount-home",
		"bind mount the user's home directory", OPT_MOUNT_HOME),
	FLAG_OPT("no-container-mount-home",
		"do not bind mount the user's home directory", OPT_NO_MOUNT_HOME),
	FLAG_OPT("container-remap-root",
		"ask to be remapped to root inside the container", OPT_REMAP_ROOT),
	FLAG_OPT("no-container-remap-root",
		"do not remap to root inside the container", OPT_NO_REMAP_ROOT),
	FLAG_OPT("container-entrypoint",
		"execute the entrypoint from the container image", OPT_ENTRYPOINT),
	FLAG_OPT("no-container-entrypoint",
		"do not execute the entrypoint from the container image", OPT_NO_ENTRYPOINT),
	FLAG_OPT("container-writable",
		"make the container filesystem writable", OPT_WRITABLE),
	FLAG_OPT("container-readonly",
		"make the container filesystem read-only", OPT_READONLY),
	SPANK_OPTIONS_TABLE_END
};

static int opt_cb(int val, const char *optarg, int remote)
{
	(void) remote;
	any_option = 1;
	switch (val) {
	case OPT_IMAGE:
	case OPT_MOUNTS:
	case OPT_WORKDIR:
	case OPT_NAME:
	case OPT_SAVE:
	case OPT_ENV:
		if (optarg == NULL || optarg[0] == '\0') {
			slurm_error("container_stub: --%s needs a non-empty argument",
				    options[val - 1].name);
			return -1;
		}
		free(str_val[val]);
		str_val[val] = strdup(optarg);
		break;
	case OPT_MOUNT_HOME:    mount_home = 1; break;
	case OPT_NO_MOUNT_HOME: mount_home = 0; break;
	case OPT_REMAP_ROOT:    remap_root = 1; break;
	case OPT_NO_REMAP_ROOT: remap_root = 0; break;
	case OPT_ENTRYPOINT:    entrypoint = 1; break;
	case OPT_NO_ENTRYPOINT: entrypoint = 0; break;
	case OPT_WRITABLE:      writable = 1; break;
	case OPT_READONLY:      writable = 0; break;
	default:
		return -1;
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	struct spank_option *o;

	(void) ac;
	(void) av;
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
		return 0;

	for (o = options; o->name; o++) {
		spank_err_t rc = spank_option_register(sp, o);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("container_stub: cannot register --%s: %s",
				    o->name, spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}

/* Fill in anything the callbacks did not deliver (remote context only). */
static void fill_from_getopt(spank_t sp)
{
	struct spank_option *o;

	for (o = options; o->name; o++) {
		char *arg = NULL;
		int have;

		if (o->val <= OPT_ENV)
			have = str_val[o->val] != NULL;
		else if (o->val <= OPT_NO_MOUNT_HOME)
			have = mount_home >= 0;
		else if (o->val <= OPT_NO_REMAP_ROOT)
			have = remap_root >= 0;
		else if (o->val <= OPT_NO_ENTRYPOINT)
			have = entrypoint >= 0;
		else
			have = writable >= 0;
		if (have)
			continue;
		if (spank_option_getopt(sp, o, &arg) == ESPANK_SUCCESS)
			(void) opt_cb(o->val, arg, 1);
	}
}

static void export(spank_t sp, const char *name, const char *value)
{
	spank_err_t rc = spank_setenv(sp, name, value, 1);
	if (rc != ESPANK_SUCCESS)
		slurm_error("container_stub: setenv %s: %s", name, spank_strerror(rc));
}

static void export_flag(spank_t sp, const char *name, int v)
{
	if (v >= 0)
		export(sp, name, v ? "1" : "0");
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	int i;

	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return 0;

	fill_from_getopt(sp);
	if (!any_option)
		return 0;

	for (i = OPT_IMAGE; i <= OPT_ENV; i++)
		if (str_val[i])
			export(sp, str_env[i], str_val[i]);
	export_flag(sp, "SPANK_CONTAINER_MOUNT_HOME", mount_home);
	export_flag(sp, "SPANK_CONTAINER_REMAP_ROOT", remap_root);
	export_flag(sp, "SPANK_CONTAINER_ENTRYPOINT", entrypoint);
	export_flag(sp, "SPANK_CONTAINER_WRITABLE", writable);
	export(sp, "SPANK_CONTAINER_STUB", "1");

	slurm_verbose("container_stub: image=%s (stub: no container is started)",
		      str_val[OPT_IMAGE] ? str_val[OPT_IMAGE] : "(none)");
	return 0;
}

/* Like Pyxis, start the task in --container-workdir (it must exist: the job made it). */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp) || !str_val[OPT_WORKDIR])
		return 0;
	if (chdir(str_val[OPT_WORKDIR]) != 0) {
		slurm_error("container_stub: --container-workdir %s: %s",
			    str_val[OPT_WORKDIR], strerror(errno));
		return -1;
	}
	return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	int i;

	(void) sp;
	(void) ac;
	(void) av;
	for (i = 0; i <= OPT_ENV; i++) {
		free(str_val[i]);
		str_val[i] = NULL;
	}
	return 0;
}
