// Starts Swagger UI on the server's own API document (a file, not inline: the page's
// Content-Security-Policy allows scripts from this origin only).
window.ui = SwaggerUIBundle({
  url: "../openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  // The document names http://localhost:8000; "Try it out" talks to the server that serves
  // this page, wherever it runs.
  requestInterceptor: (request) => {
    const url = new URL(request.url, window.location.href);
    url.protocol = window.location.protocol;
    url.host = window.location.host;
    request.url = url.toString();
    return request;
  },
});
