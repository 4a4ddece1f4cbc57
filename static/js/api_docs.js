// The API documentation page: Swagger UI (drf-spectacular-sidecar's bundle, served by this
// site) reading the schema the page names. A static script, not the inline one drf-spectacular's
// own view writes: the Content-Security-Policy allows no inline script.
(function () {
  "use strict";
  const mount = document.getElementById("swagger-ui");
  if (!mount || typeof SwaggerUIBundle !== "function") return;
  SwaggerUIBundle({
    url: mount.dataset.schemaUrl,
    domNode: mount,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    deepLinking: true,
    // Reading is safe to try from here; anything that changes a crawl is done on its page or
    // with a token, not by a button on the docs.
    supportedSubmitMethods: ["get"],
    // The browser's session signs the requests: no token is typed into this page.
    withCredentials: true,
    defaultModelsExpandDepth: 0,
    displayRequestDuration: true,
    validatorUrl: null,
  });
})();
