// modhooks: PyTorch's module hooks for libtorch.
// SPDX-License-Identifier: BSD-3-Clause
#pragma once

/// Inspection and fault injection for the fake ACL runtime (libascendcl.so, libnnopbase.so and
/// libopapi.so built from this directory). It lives in its own library, libfake_acl_control.so,
/// which the three fakes and the tests share, so a test sees exactly what the backend did through
/// its dlopen path.

#include <cstdint>

extern "C" {

/// Every ACL call since the last reset, one per line: "<api> <arguments>[ -> <error>]".
const char* fake_acl_calls();
/// Problems the fake detected that a real runtime would not report (memory freed while queued
/// work still uses it, access outside any allocation, a null stream), one per line.
const char* fake_acl_violations();
/// Forgets calls, violations and injections, restores the default workspace size. aclInit,
/// live allocations, streams and objects stay: like the real runtime's, they belong to the
/// process, and a second aclInit answers 100002.
void fake_acl_reset();
/// The next `count` calls of `api` (-1: all of them) fail with `error`; functions returning a
/// pointer return null instead.
void fake_acl_inject(const char* api, int error, int count);
/// Workspace size the fake aclnn operators ask for (default 64; 0 means none).
void fake_acl_set_workspace_size(uint64_t bytes);
/// aclrtMalloc'd blocks not yet freed.
long fake_acl_live_allocations();
/// Streams created and not destroyed.
long fake_acl_live_streams();
/// aclTensor, aclScalar and aclOpExecutor objects not yet destroyed or consumed.
long fake_acl_live_objects();
/// Tasks queued on any stream and not yet run by a synchronisation.
long fake_acl_pending_tasks();
}
