"""The web plumbing both apps' doors share: who may see what (access.py), logins and their
throttle (logins.py), the Content-Security-Policy (csp.py), refused and failed requests
(bad_requests.py, error_pages.py), the API's errors, authentication and serializer bases
(api_errors.py, drf.py, serializers.py), the websockets' origins and login-required
consumers (origins.py, consumers.py), safe lookups (lookups.py) and the health report
(health.py)."""
