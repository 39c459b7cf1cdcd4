// Facts about shares that both the tokens actor (which keeps them) and the gateway (which serves them) need.
import { hubUrl } from './urls.js';

/** Share codes live from one minute to one year; a day unless asked otherwise (reference §2.11). */
export const SHARE_CODE_MIN_SECONDS = 60;
export const SHARE_CODE_MAX_SECONDS = 31_536_000;
export const SHARE_CODE_DEFAULT_SECONDS = 86_400;

/** The hub page where a share code is accepted. */
export const ACCEPT_SHARE_PATH = '/hub/accept-share';

/** The page's URL under Hub.base_url, with the code. */
export const acceptShareUrl = (code: string): string => `${hubUrl(ACCEPT_SHARE_PATH)}?code=${encodeURIComponent(code)}`;
