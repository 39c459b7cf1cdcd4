// The `handler` label of jupyterhub_request_duration_seconds: the established hub labels each request with the
// module and class of the handler that answered it, and the community's dashboards filter on those names
// (jupyterhub.jsonnet leaves jupyterhub.apihandlers.users.SpawnProgressAPIHandler, an event stream, out of its
// latency heatmap). Our routes are named by pattern (`hub_request_duration_seconds{route}`); this is the one table
// from a route pattern to the class the established hub 6.1 answers the same URL with. A route it has no handler
// for (our own endpoints) keeps its pattern as its name: distinct, bounded, and never taken for one of its.

const API = 'jupyterhub.apihandlers';
const PAGES = 'jupyterhub.handlers';

const BY_ROUTE: Readonly<Record<string, string>> = {
  '/': `${PAGES}.base.PrefixRedirectHandler`,
  '/hub/*': `${PAGES}.pages.RootHandler`,
  '/hub/home': `${PAGES}.pages.HomeHandler`,
  '/hub/admin/*': `${PAGES}.pages.AdminHandler`,
  '/hub/login': `${PAGES}.login.LoginHandler`,
  '/hub/logout': `${PAGES}.login.LogoutHandler`,
  // an identity provider's sign-in: the established hub's own authenticators for it (oauthenticator) name them so
  '/hub/oauth_login': 'oauthenticator.oauth2.OAuthLoginHandler',
  '/hub/oauth_callback': 'oauthenticator.oauth2.OAuthCallbackHandler',
  '/hub/spawn/*': `${PAGES}.pages.SpawnHandler`,
  '/hub/spawn-pending/*': `${PAGES}.pages.SpawnPendingHandler`,
  '/hub/token': `${PAGES}.pages.TokenPageHandler`,
  '/hub/accept-share': `${PAGES}.pages.AcceptShareHandler`,
  '/hub/user/*': `${PAGES}.base.UserUrlHandler`,
  '/hub/user-redirect/*': `${PAGES}.base.UserRedirectHandler`,
  '/hub/health': `${PAGES}.pages.HealthCheckHandler`,
  '/hub/metrics': `${PAGES}.metrics.MetricsHandler`,
  '/hub/static/*': `${PAGES}.static.CacheControlStaticFilesHandler`,
  // no route answered: its catch-all page
  unmatched: `${PAGES}.base.Template404`,

  '/hub/api': `${API}.hub.RootAPIHandler`,
  '/hub/api/info': `${API}.hub.InfoAPIHandler`,
  '/hub/api/shutdown': `${API}.hub.ShutdownAPIHandler`,
  '/hub/api/proxy': `${API}.proxy.ProxyAPIHandler`,
  '/hub/api/services': `${API}.services.ServiceListAPIHandler`,
  '/hub/api/services/:name': `${API}.services.ServiceAPIHandler`,
  '/hub/api/oauth2/authorize': `${API}.auth.OAuthAuthorizeHandler`,
  '/hub/api/oauth2/token': `${API}.auth.OAuthTokenHandler`,
  '/hub/api/user': `${API}.users.SelfAPIHandler`,
  '/hub/api/users': `${API}.users.UserListAPIHandler`,
  '/hub/api/users/:name': `${API}.users.UserAPIHandler`,
  '/hub/api/users/:name/activity': `${API}.users.ActivityAPIHandler`,
  '/hub/api/users/:name/tokens': `${API}.users.UserTokenListAPIHandler`,
  '/hub/api/users/:name/tokens/:id': `${API}.users.UserTokenAPIHandler`,
  '/hub/api/users/:name/server': `${API}.users.UserServerAPIHandler`,
  '/hub/api/users/:name/servers': `${API}.users.UserServerAPIHandler`,
  '/hub/api/users/:name/servers/:server': `${API}.users.UserServerAPIHandler`,
  '/hub/api/users/:name/server/progress': `${API}.users.SpawnProgressAPIHandler`,
  '/hub/api/users/:name/servers/:server/progress': `${API}.users.SpawnProgressAPIHandler`,
  '/hub/api/users/:name/shared': `${API}.shares.UserShareListAPIHandler`,
  '/hub/api/users/:name/shared/:owner/:server': `${API}.shares.UserShareAPIHandler`,
  '/hub/api/groups': `${API}.groups.GroupListAPIHandler`,
  '/hub/api/groups/:name': `${API}.groups.GroupAPIHandler`,
  '/hub/api/groups/:name/users': `${API}.groups.GroupUsersAPIHandler`,
  '/hub/api/groups/:name/properties': `${API}.groups.GroupPropertiesAPIHandler`,
  '/hub/api/groups/:name/shared': `${API}.shares.GroupShareListAPIHandler`,
  '/hub/api/groups/:name/shared/:owner/:server': `${API}.shares.GroupShareAPIHandler`,
  '/hub/api/shares/:owner': `${API}.shares.ServerShareAPIHandler`,
  '/hub/api/shares/:owner/:server': `${API}.shares.ServerShareAPIHandler`,
  '/hub/api/share-codes/:owner': `${API}.shares.ServerShareCodeAPIHandler`,
  '/hub/api/share-codes/:owner/:server': `${API}.shares.ServerShareCodeAPIHandler`,
};

/** The established hub's handler for a route pattern (called once per label set, never per request). */
export function establishedHandler(route: string): string {
  return BY_ROUTE[route] ?? route;
}
