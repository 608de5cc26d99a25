//! Mooncake's `/api/v1/*` operations routes: drain jobs (tidewire runs none), segment status,
//! tenant quotas (tidewire has no tenants) and `remove_all`, answering as Mooncake's master does.

use super::*;

/// Mooncake's SegmentStatus::OK and GRACEFULLY_UNMOUNTING.
const SEGMENT_OK: i32 = 1;
const SEGMENT_GRACEFULLY_UNMOUNTING: i32 = 4;
/// Largest tenant quota Mooncake accepts (2^63 - 1).
const MAX_TENANT_QUOTA: u64 = i64::MAX as u64;

/// Mooncake's job id: `<u64>-<u64>` (its `StringToUuid`).
fn job_id(raw: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(raw).ok()?;
    let (a, b) = s.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl Admin {
    /// POST `/api/v1/drain_jobs`: Mooncake's body checks, then its segment checks; tidewire
    /// runs no drain jobs, so a valid request gets Mooncake's "not in this mode" (409, -1011).
    pub(super) fn create_drain_job(&self, r: &HttpRequest) -> HttpResponse {
        let req: DrainJobRequest = match json_body(r) {
            Ok(v) => v,
            Err(reply) => return reply,
        };
        if !self.master.serving() {
            return not_active();
        }
        if req.segments.is_empty() {
            return error(400, code::INVALID_PARAMS, code_name(code::INVALID_PARAMS));
        }
        for name in req.segments.iter().chain(&req.target_segments) {
            if self.master.segment_detail(name).is_none() {
                return error(
                    404,
                    code::SEGMENT_NOT_FOUND,
                    code_name(code::SEGMENT_NOT_FOUND),
                );
            }
        }
        unavailable()
    }

    /// GET `/api/v1/drain_jobs/query`, POST `/api/v1/drain_jobs/cancel`: no job ever exists.
    pub(super) fn drain_job(&self, r: &HttpRequest) -> HttpResponse {
        if job_id(&r.param("job_id").unwrap_or_default()).is_none() {
            return error(400, code::INVALID_PARAMS, "Missing or invalid job_id");
        }
        if !self.master.serving() {
            return not_active();
        }
        error(404, JOB_NOT_FOUND, code_name(JOB_NOT_FOUND))
    }

    /// GET `/api/v1/segments/status?segment=S`: Mooncake's segment lifecycle state. A mounted
    /// segment is `OK`; one whose owner missed its heartbeats (readable, no new placements,
    /// dropped when `--client_grace_sec` runs out) is `GRACEFULLY_UNMOUNTING`.
    pub(super) fn segment_status(&self, r: &HttpRequest) -> HttpResponse {
        let raw = r.param("segment").unwrap_or_default();
        if raw.is_empty() {
            return error(400, code::INVALID_PARAMS, "Missing segment query parameter");
        }
        if !self.master.serving() {
            return not_active();
        }
        let name = String::from_utf8_lossy(&raw).into_owned();
        let Some(seg) = self.master.segment_detail(&name) else {
            return error(
                404,
                code::SEGMENT_NOT_FOUND,
                code_name(code::SEGMENT_NOT_FOUND),
            );
        };
        let (status, status_name) = if seg.suspended {
            (SEGMENT_GRACEFULLY_UNMOUNTING, "GRACEFULLY_UNMOUNTING")
        } else {
            (SEGMENT_OK, "OK")
        };
        json(
            200,
            &SegmentStatusReply {
                success: true,
                segment: name,
                status,
                status_name,
                error_code: 0,
                error_message: "",
            },
        )
    }

    /// GET `/api/v1/tenant_quotas`: tidewire has no tenants, as Mooncake without
    /// `--enable_multi_tenants` (409, -1011).
    pub(super) fn get_tenant_quotas(&self, _r: &HttpRequest) -> HttpResponse {
        unavailable()
    }

    /// PUT `/api/v1/tenant_quotas?tenant_id=T` `{"requested_quota_bytes":N}`: Mooncake's checks,
    /// then no tenants (409, -1011).
    pub(super) fn put_tenant_quota(&self, r: &HttpRequest) -> HttpResponse {
        if r.param("tenant_id").unwrap_or_default().is_empty() {
            return error(400, code::INVALID_PARAMS, "Missing or invalid tenant_id");
        }
        let req: TenantQuotaRequest = match json_body(r) {
            Ok(v) => v,
            Err(reply) => return reply,
        };
        if req.requested_quota_bytes == 0 || req.requested_quota_bytes > MAX_TENANT_QUOTA {
            return error(
                400,
                code::INVALID_PARAMS,
                "Tenant quota must be in [1, 2^63 - 1] bytes",
            );
        }
        if !self.master.serving() {
            return not_active();
        }
        unavailable()
    }

    /// DELETE `/api/v1/tenant_quotas?tenant_id=T`: no tenants (409, -1011).
    pub(super) fn delete_tenant_quota(&self, r: &HttpRequest) -> HttpResponse {
        if r.param("tenant_id").unwrap_or_default().is_empty() {
            return error(400, code::INVALID_PARAMS, "Missing or invalid tenant_id");
        }
        if !self.master.serving() {
            return not_active();
        }
        unavailable()
    }

    /// POST `/api/v1/remove_all[?force=true|1][&tenant_id=T]`: removes every object (leased
    /// ones only with `force`), as the Store's `remove_all`; `{"success":true,
    /// "removed_count":N}`. Every tidewire object is the `default` tenant's, so another
    /// `tenant_id` removes nothing.
    pub(super) fn remove_all(&self, r: &HttpRequest) -> HttpResponse {
        let force = matches!(r.param("force").as_deref(), Some(b"true") | Some(b"1"));
        let tenant = r.param("tenant_id").unwrap_or_default();
        let removed = if tenant.is_empty() || tenant == b"default" {
            match self
                .master
                .handle(tidewire::store::proto::Request::RemoveAll { force, from: None })
            {
                Some(tidewire::store::proto::Reply::Count { count }) => count,
                Some(tidewire::store::proto::Reply::Error { code: c, message }) => {
                    return error(500, c, &message);
                }
                other => {
                    return error(
                        500,
                        code::INTERNAL_ERROR,
                        &format!("unexpected reply {other:?}"),
                    );
                }
            }
        } else {
            0
        };
        json(
            200,
            &RemoveAllReply {
                success: true,
                removed_count: removed,
            },
        )
    }
}

/// A JSON request body, or Mooncake's 400 (-600, "Invalid JSON body: ...") for one that is not.
fn json_body<T: serde::de::DeserializeOwned>(r: &HttpRequest) -> Result<T, HttpResponse> {
    serde_json::from_slice(&r.body).map_err(|e| {
        error(
            400,
            code::INVALID_PARAMS,
            &format!("Invalid JSON body: {e}"),
        )
    })
}
