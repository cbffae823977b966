#!/usr/bin/env python3
"""test_install.py BUILD_DIR [EXPECTED_PATH...] - `meson install` into a temporary prefix and
check what landed there.

Checks: the install succeeds; every file meson says it installs exists under the destination
with the built size; each EXPECTED_PATH (relative to the prefix, e.g. bin/ctrun) is among
them; installed programs answer --version; man pages are roff with a matching .TH; each
installed public header compiles on its own; each pkg-config file resolves, and a program
using it compiles and links against the installed copy. Exit 77 when the build installs
nothing yet.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail("%s exited %d:\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
    return r


def main():
    build = os.path.abspath(sys.argv[1])
    expected = sys.argv[2:]
    meson = shutil.which("meson") or fail("meson not on PATH")
    installed = json.loads(run([meson, "introspect", build, "--installed"]).stdout)
    opts = {o["name"]: o["value"] for o in json.loads(run([meson, "introspect", build, "--buildoptions"]).stdout)}
    prefix = opts["prefix"]
    if not installed:
        print("SKIP: this build installs nothing yet")
        sys.exit(77)

    with tempfile.TemporaryDirectory(prefix="ctrun-install-") as dest:
        run([meson, "install", "-C", build, "--no-rebuild", "--destdir", dest])
        root = dest + prefix

        rel = {}
        for src, dst in installed.items():
            where = dest + dst
            if not os.path.exists(where):
                fail("%s was not installed (expected at %s)" % (src, dst))
            if os.path.isfile(src) and not dst.endswith((".pc",)) and os.path.getsize(src) != os.path.getsize(where):
                fail("%s differs in size from %s" % (where, src))
            rel[os.path.relpath(dst, prefix)] = where
        for e in expected:
            if e not in rel:
                fail("%s is not installed; installed: %s" % (e, ", ".join(sorted(rel))))

        env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(
            os.path.dirname(p) for r, p in rel.items() if ".so" in os.path.basename(r)))
        for r, path in sorted(rel.items()):
            if r.startswith("bin/"):
                out = run([path, "--version"], env=env).stdout
                if not out.strip():
                    fail("%s --version printed nothing" % r)
            elif r.startswith("share/man/man"):
                section = r.split("/")[2][3:]
                name = os.path.basename(r)
                with open(path) as f:
                    text = f.read()
                th = [l for l in text.splitlines() if l.startswith(".TH ")]
                if not th:
                    fail("%s has no .TH line" % r)
                want = name.rsplit(".", 1)[0].upper()
                parts = th[0].split()
                if parts[1].strip('"').upper() != want or parts[2].strip('"') != section:
                    fail("%s: .TH says %s %s, file says %s(%s)" % (r, parts[1], parts[2], want, section))
            elif r.startswith("include/") and r.endswith(".h"):
                with tempfile.NamedTemporaryFile("w", suffix=".c", delete=False) as src:
                    src.write("#include <%s>\nint main(void) { return 0; }\n" % r[len("include/"):])
                run(["cc", "-std=c17", "-Wall", "-Werror", "-I", root + "/include", "-c", src.name,
                     "-o", src.name + ".o"])
                os.unlink(src.name)
                os.unlink(src.name + ".o")

        for r, path in sorted(rel.items()):
            if not r.endswith(".pc"):
                continue
            name = os.path.basename(r)[:-3]
            pcenv = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(path))
            flags = run(["pkg-config", "--define-variable=prefix=" + root, "--cflags", "--libs", name],
                        env=pcenv).stdout.split()
            headers = [x for x in rel if x.startswith("include/") and x.endswith(".h")]
            with tempfile.TemporaryDirectory() as t:
                with open(t + "/use.c", "w") as f:
                    for h in headers:
                        f.write("#include <%s>\n" % h[len("include/"):])
                    f.write("int main(void) { return 0; }\n")
                run(["cc", "-std=c17", t + "/use.c", "-o", t + "/use"] + flags, env=pcenv)
                run([t + "/use"], env=env)
        print("installed and checked %d files under %s" % (len(rel), prefix))


if __name__ == "__main__":
    main()
