// What both sides of `npm run bench transport` agree on: socket names and a bytes-in, bytes-out echo service.
import type * as grpc from '@grpc/grpc-js';

export const RAW_SOCKET = 'raw.sock';
export const GRPC_SOCKET = 'echo.sock';
export const HUB_PING_SOCKET = 'auth.sock';

const same = (b: Buffer) => b;
const method = (path: string, stream: boolean) => ({
  path, requestStream: stream, responseStream: stream,
  requestSerialize: same, requestDeserialize: same, responseSerialize: same, responseDeserialize: same,
});
export const ECHO_SERVICE = { echo: method('/bench.Echo/Echo', false), chat: method('/bench.Echo/Chat', true) } as unknown as grpc.ServiceDefinition;
