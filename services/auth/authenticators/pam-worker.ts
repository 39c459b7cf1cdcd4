// One PAM login at a time, in a worker thread: pam_authenticate blocks for seconds (pam_faildelay sleeps after a
// wrong password), so ./pam.ts hands each login to a small pool of these and waits with the caller's deadline.
// libpam and libc are reached through koffi (no native build). Nothing here logs: the password never leaves this
// file except as the conversation's answer to PAM, in memory PAM owns and frees.
import { parentPort } from 'node:worker_threads';
import koffi from 'koffi';

export interface PamJob {
  id: number;
  service: string;
  /** the name as typed: Unix names are case-sensitive */
  username: string;
  password: string;
  encoding: 'utf8' | 'latin1';
  checkAccount: boolean;
  openSessions: boolean;
}

export type PamAnswer = { id: number } & (
  | { ok: true; groups: string[]; sessionProblem?: string }
  | { ok: false; reason: string; unavailable?: boolean }
);

// <security/_pam_types.h> (Linux-PAM)
const PAM_SUCCESS = 0;
const PAM_BUF_ERR = 5;
const PAM_AUTH_ERR = 7;
const PAM_CRED_INSUFFICIENT = 8;
const PAM_AUTHINFO_UNAVAIL = 9;
const PAM_USER_UNKNOWN = 10;
const PAM_ACCT_EXPIRED = 13;
const PAM_CONV_ERR = 19;
const PAM_SILENT = 0x8000;
const PAM_DISALLOW_NULL_AUTHTOK = 0x0001;
const PAM_PROMPT_ECHO_OFF = 1;
const PAM_PROMPT_ECHO_ON = 2;
const PAM_ERROR_MSG = 3;
const PAM_TEXT_INFO = 4;
const PAM_MAX_NUM_MSG = 32;
const ERANGE = 34;
const NSS_BUFFER_MAX = 1 << 20;
const DAY_MS = 86_400_000;

const INVALID_CREDENTIALS = 'invalid credentials';

const PamMessage = koffi.struct('pam_message', { msg_style: 'int', msg: 'void *' });
const PamResponse = koffi.struct('pam_response', { resp: 'void *', resp_retcode: 'int' });
const PamConversation = koffi.proto('int pam_conv_fn(int num_msg, void *msg, void *resp, void *appdata_ptr)');
const PamConv = koffi.struct('pam_conv', { conv: koffi.pointer(PamConversation), appdata_ptr: 'void *' });
const Passwd = koffi.struct('passwd', { pw_name: 'void *', pw_passwd: 'void *', pw_uid: 'uint32', pw_gid: 'uint32', pw_gecos: 'void *', pw_dir: 'void *', pw_shell: 'void *' });
const Group = koffi.struct('group', { gr_name: 'void *', gr_passwd: 'void *', gr_gid: 'uint32', gr_mem: 'void *' });
const Spwd = koffi.struct('spwd', { sp_namp: 'void *', sp_pwdp: 'void *', sp_lstchg: 'long', sp_min: 'long', sp_max: 'long', sp_warn: 'long', sp_inact: 'long', sp_expire: 'long', sp_flag: 'ulong' });
const POINTER_SIZE = koffi.sizeof('void *');
const RESPONSE_SIZE = koffi.sizeof(PamResponse);

type Pointer = bigint | null;

function bind() {
  const pam = koffi.load('libpam.so.0');
  const libc = koffi.load('libc.so.6');
  return {
    pam_start: pam.func('int pam_start(const void *service, const void *user, const pam_conv *conv, _Out_ void **pamh)'),
    pam_authenticate: pam.func('int pam_authenticate(void *pamh, int flags)'),
    pam_acct_mgmt: pam.func('int pam_acct_mgmt(void *pamh, int flags)'),
    pam_open_session: pam.func('int pam_open_session(void *pamh, int flags)'),
    pam_close_session: pam.func('int pam_close_session(void *pamh, int flags)'),
    pam_end: pam.func('int pam_end(void *pamh, int status)'),
    pam_strerror: pam.func('const char *pam_strerror(void *pamh, int errnum)'),
    // PAM frees the conversation's answers with free(): they must come from libc's allocator
    calloc: libc.func('void *calloc(size_t count, size_t size)'),
    strdup: libc.func('void *strdup(const void *s)'),
    strlen: libc.func('size_t strlen(const void *s)'),
    memset: libc.func('void *memset(void *s, int c, size_t n)'),
    free: libc.func('void free(void *p)'),
    // the reentrant forms: several workers may look people up at once
    getpwnam_r: libc.func('int getpwnam_r(const void *name, _Out_ passwd *pwd, void *buf, size_t buflen, _Out_ void **result)'),
    getgrgid_r: libc.func('int getgrgid_r(uint32 gid, _Out_ group *grp, void *buf, size_t buflen, _Out_ void **result)'),
    getgrouplist: libc.func('int getgrouplist(const void *user, uint32 group, void *groups, void *ngroups)'),
    getspnam_r: libc.func('int getspnam_r(const void *name, _Out_ spwd *spbuf, void *buf, size_t buflen, _Out_ void **result)'),
  };
}

type Libraries = ReturnType<typeof bind>;
let libraries: Libraries | undefined;
let loadProblem: string | undefined;
try {
  libraries = bind();
} catch (err) {
  loadProblem = `libpam not loadable: ${(err as Error).message}`;
}

/** A NUL-terminated copy of `s` in `encoding`, for C. */
function cString(s: string, encoding: BufferEncoding): Buffer {
  const bytes = Buffer.alloc(Buffer.byteLength(s, encoding) + 1);
  bytes.write(s, encoding);
  return bytes;
}

function readCString(lib: Libraries, p: Pointer, encoding: BufferEncoding): string {
  if (!p) return '';
  const length = Number(lib.strlen(p));
  return Buffer.from(koffi.view(p, length)).toString(encoding);
}

// ---- the conversation: PAM asks, this answers with the login's name and password ----

/** What the conversation answers with, set for the duration of one login. */
let answering: { username: Buffer; password: Buffer } | null = null;

function freeResponses(lib: Libraries, responses: bigint, count: number): void {
  for (let i = 0; i < count; i++) {
    const reply = koffi.decode(responses, i * RESPONSE_SIZE, 'void *') as Pointer;
    if (reply) {
      lib.memset(reply, 0, lib.strlen(reply));
      lib.free(reply);
    }
  }
  lib.free(responses);
}

/** Linux-PAM passes `msg` as an array of pointers to messages; the answers are one calloc'd array PAM frees. */
function converse(lib: Libraries, count: number, messages: bigint, responsesOut: bigint): number {
  if (!answering || count <= 0 || count > PAM_MAX_NUM_MSG) return PAM_CONV_ERR;
  const responses = lib.calloc(count, RESPONSE_SIZE) as Pointer;
  if (!responses) return PAM_BUF_ERR;
  for (let i = 0; i < count; i++) {
    const message = koffi.decode(koffi.decode(messages, i * POINTER_SIZE, 'void *'), PamMessage) as { msg_style: number };
    let answer: Buffer | null;
    switch (message.msg_style) {
      case PAM_PROMPT_ECHO_OFF: answer = answering.password; break;
      case PAM_PROMPT_ECHO_ON: answer = answering.username; break;
      case PAM_ERROR_MSG: case PAM_TEXT_INFO: answer = null; break; // nobody to show them to
      default: freeResponses(lib, responses, i); return PAM_CONV_ERR; // binary prompts and the like
    }
    const reply = answer ? lib.strdup(answer) as Pointer : null;
    if (answer && !reply) {
      freeResponses(lib, responses, i);
      return PAM_BUF_ERR;
    }
    koffi.encode(responses, i * RESPONSE_SIZE, PamResponse, { resp: reply, resp_retcode: 0 });
  }
  koffi.encode(responsesOut, 'void *', responses);
  return PAM_SUCCESS;
}

// one registration for the worker's life: PAM keeps the pointer from pam_start until pam_end
const conversation = libraries
  ? koffi.register((count: number, messages: bigint, responses: bigint) => converse(libraries!, count, messages, responses), koffi.pointer(PamConversation))
  : null;

// ---- what the system knows about the account ----

/** Calls a *_r lookup with a buffer grown until the entry fits; null when there is no entry. */
function lookup<T>(call: (buf: Buffer, result: [Pointer]) => number, read: (buf: Buffer) => T): T | null {
  for (let size = 16_384; size <= NSS_BUFFER_MAX; size *= 2) {
    const buf = Buffer.alloc(size);
    const result: [Pointer] = [null];
    const status = call(buf, result);
    try {
      if (status === ERANGE) continue;
      return status === 0 && result[0] ? read(buf) : null;
    } finally {
      buf.fill(0); // a shadow entry holds the password hash
    }
  }
  return null;
}

/** The names of the person's Unix groups, primary first, then supplementary. */
function unixGroups(lib: Libraries, user: Buffer, encoding: BufferEncoding): string[] {
  const pwd: { pw_gid?: number } = {};
  const primary = lookup((buf, result) => lib.getpwnam_r(user, pwd, buf, buf.length, result), () => pwd.pw_gid as number);
  if (primary === null) return []; // PAM knows the person, the name service does not
  let gids = new Uint32Array(64);
  const count = new Int32Array([gids.length]);
  while (lib.getgrouplist(user, primary, gids, count) === -1) {
    gids = new Uint32Array(Math.max(count[0], gids.length * 2));
    count[0] = gids.length;
  }
  const names = new Set<string>();
  for (const gid of gids.subarray(0, count[0])) {
    const grp: { gr_name?: Pointer } = {};
    const name = lookup((buf, result) => lib.getgrgid_r(gid, grp, buf, buf.length, result), () => readCString(lib, grp.gr_name ?? null, encoding));
    if (name) names.add(name);
  }
  return [...names];
}

/** The shadow entry's lock marker and expiry, read only after PAM refused, to name the reason for the audit. */
function shadowState(lib: Libraries, user: Buffer): { locked: boolean; expired: boolean } {
  const entry: { sp_pwdp?: Pointer; sp_expire?: number | bigint } = {};
  return lookup((buf, result) => lib.getspnam_r(user, entry, buf, buf.length, result), () => {
    const expire = Number(entry.sp_expire ?? -1);
    return {
      locked: Boolean(entry.sp_pwdp) && koffi.decode.uint8(entry.sp_pwdp) === 0x21, // '!': usermod -L, passwd -l
      expired: expire >= 0 && Math.floor(Date.now() / DAY_MS) >= expire, // pam_unix's own rule
    };
  }) ?? { locked: false, expired: false };
}

// ---- one login ----

function login(lib: Libraries, job: PamJob): PamAnswer {
  const { id, encoding } = job;
  const username = cString(job.username, encoding);
  const password = cString(job.password, encoding);
  const failed = (status: number, handle: Pointer = null) => ({ id, ok: false as const, reason: `PAM error: ${lib.pam_strerror(handle, status)}`, unavailable: status === PAM_AUTHINFO_UNAVAIL || undefined });
  const handleOut: [Pointer] = [null];
  answering = { username, password };
  let status = lib.pam_start(cString(job.service, 'utf8'), username, { conv: conversation, appdata_ptr: null }, handleOut);
  const handle = handleOut[0];
  if (status !== PAM_SUCCESS || !handle) {
    answering = null;
    password.fill(0);
    return failed(status);
  }
  try {
    status = lib.pam_authenticate(handle, PAM_SILENT | PAM_DISALLOW_NULL_AUTHTOK);
    if (status === PAM_AUTH_ERR || status === PAM_USER_UNKNOWN || status === PAM_CRED_INSUFFICIENT) {
      // the same reason for a wrong password and an unknown name; a locked account fails here too
      return { id, ok: false, reason: shadowState(lib, username).locked ? 'account locked' : INVALID_CREDENTIALS };
    }
    if (status !== PAM_SUCCESS) return failed(status, handle);
    if (job.checkAccount) {
      status = lib.pam_acct_mgmt(handle, PAM_SILENT | PAM_DISALLOW_NULL_AUTHTOK);
      // Debian's common-account turns pam_unix's PAM_ACCT_EXPIRED into pam_deny's PAM_AUTH_ERR: the shadow entry tells
      if (status === PAM_ACCT_EXPIRED || (status !== PAM_SUCCESS && shadowState(lib, username).expired)) return { id, ok: false, reason: 'account expired' };
      if (status !== PAM_SUCCESS) return failed(status, handle);
    }
    let sessionProblem: string | undefined;
    if (job.openSessions) {
      // opened and closed at once: the auth actor keeps no PAM handle past a login
      const opened = lib.pam_open_session(handle, PAM_SILENT);
      const closed = opened === PAM_SUCCESS ? lib.pam_close_session(handle, PAM_SILENT) : PAM_SUCCESS;
      if (opened !== PAM_SUCCESS) sessionProblem = `pam_open_session: ${lib.pam_strerror(handle, opened)}`;
      else if (closed !== PAM_SUCCESS) sessionProblem = `pam_close_session: ${lib.pam_strerror(handle, closed)}`;
    }
    return { id, ok: true, groups: unixGroups(lib, username, encoding), sessionProblem };
  } finally {
    lib.pam_end(handle, status);
    answering = null;
    password.fill(0);
  }
}

function answer(job: PamJob): PamAnswer {
  if (!libraries) return { id: job.id, ok: false, reason: `PAM error: ${loadProblem}`, unavailable: true };
  try {
    return login(libraries, job);
  } catch (err) {
    return { id: job.id, ok: false, reason: `PAM error: ${(err as Error).message}`, unavailable: true };
  }
}

parentPort?.on('message', (job: PamJob) => parentPort!.postMessage(answer(job)));
